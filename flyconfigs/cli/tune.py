"""``flyconfigs tune``: the terminal side of a tuning session (arguments, the progress
bar on stderr, the summary); the session itself is :mod:`flyconfigs.tuner.session`."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from flyconfigs.cli._common import Usage, add_command, add_grid_arguments, emit_json, grid_extra, key_grids

__all__ = ["register"]


def _progress_bar(enabled: bool) -> tuple[Callable[[str, dict[str, Any]], None], Callable[[], None]]:
    """A progress callback drawing keys and candidates on stderr (off when stderr is not
    a terminal), and a function that closes it."""
    state: dict[str, Any] = {"bar": None, "best": None, "start": None}
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None

    def on(event: str, data: dict[str, Any]) -> None:
        import time

        if event == "start":
            state["start"] = time.monotonic()
            if enabled and tqdm is not None:
                state["bar"] = tqdm(total=data["keys"], unit="key", file=sys.stderr, dynamic_ncols=True,
                                    desc=f"tuning on {data['device']}")
            else:
                print(f"tuning {data['keys']} keys on {data['device']}", file=sys.stderr)
        elif event == "candidate":
            bar = state["bar"]
            if bar is not None:
                key = " ".join(f"{k}={v}" for k, v in data["key"].items())
                best = f", best so far {state['best']:.2f} us" if state["best"] is not None else ""
                bar.set_postfix_str(f"{key}: candidate {data['index'] + 1}/{data['of']}{best}"[-100:])
        elif event == "lost":
            line = f"lost {data['worker']} ({data['reason']}); its key goes back in the queue"
            bar = state["bar"]
            (bar.write if bar is not None else lambda text: print(text, file=sys.stderr))(line)
        elif event in ("key", "skip"):
            key = " ".join(f"{k}={v}" for k, v in data["key"].items())
            if event == "key":
                r = data["result"]
                state["best"] = r.winner_us
                text = (f"{key}: {r.candidates} candidates, winner {r.winner_us:.2f} us (default {r.default_us:.2f} us)"
                        f" in {_split(r.seconds)}")
            else:
                text = f"{key}: already tuned, skipped"
            bar = state["bar"]
            if bar is not None:
                bar.set_postfix_str(text[-80:])
                bar.update(1)
            else:
                print(text, file=sys.stderr, flush=True)

    def close() -> None:
        if state["bar"] is not None:
            state["bar"].close()

    return on, close


def _split(seconds: dict[str, float]) -> str:
    """``12.3 s (compile 4.0 s, verify 3.1 s, time 5.2 s)``; the total is the phases' sum
    unless ``seconds`` has one."""
    phases = [name for name in ("compile", "verify", "time") if name in seconds]
    total = seconds.get("total", sum(seconds[name] for name in phases))
    return f"{total:.1f} s (" + ", ".join(f"{name} {seconds[name]:.1f} s" for name in phases) + ")"


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[list[int]]:
    """Within the block Ctrl-C or a termination signal (``timeout``, a batch system's
    stop, ``kill``) sets ``stop``, which ends the run at its next candidate or key (a
    Ray run: at once) with what it finished reported; a second signal raises
    :class:`KeyboardInterrupt` at once.  Yields the numbers of the signals caught."""
    caught: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        caught.append(signum)
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield caught
        return
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _fleet(args: argparse.Namespace) -> Any:
    """The Ray fleet ``--ray``/``--target`` ask for, or None for this host's GPUs."""
    from flyconfigs.errors import TuneError
    from flyconfigs.registry import parse_device_spec
    from flyconfigs.tuner.fleet import ray_address
    from flyconfigs.tuner.session import RayFleet

    if args.ray is None:
        if args.target is not None:
            raise Usage("--target chooses the GPUs of a Ray cluster: it needs --ray")
        return None
    if args.devices:
        raise Usage("--devices and --ray exclude each other: a Ray run tunes on every GPU of the cluster")
    try:
        address = ray_address(args.ray)
    except TuneError as exc:
        raise Usage(str(exc)) from None
    target = parse_device_spec(args.target, "--target") if args.target is not None else None
    return RayFleet(address, target)


def _ordinal(args: argparse.Namespace) -> int:
    """The GPU ``--gpu`` names; ``--device N`` (its name before 1.1) still means it, with
    a note, since ``--device`` names a device spec in every other command."""
    if args.device is None:
        return int(args.gpu)
    if not args.device.isdigit():
        raise Usage(f"--device {args.device!r}: tune measures the GPUs of this host, chosen by --gpu N or --devices "
                    f"(with --ray, --target chooses the device); --device SPEC names a device in explain, doctor and "
                    f"predict")
    if args.gpu_given:
        raise Usage("--device N is the old name of --gpu N: give one of them")
    print(f"note: --device {args.device} is read as --gpu {args.device} (a GPU ordinal of this host); --device "
          f"names a device spec in every other command", file=sys.stderr)
    return int(args.device)


class _Given(argparse.Action):
    """Stores the value and remembers that it was given."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.gpu_given = True


def _tune(args: argparse.Namespace) -> int:
    from flyconfigs.tuner.options import TuneOptions
    from flyconfigs.tuner.session import SessionRequest, device_ordinals, run_session

    extra = grid_extra(args)
    grids = key_grids(args)
    fleet = _fleet(args)
    ordinals = device_ordinals(args.devices, args.backend) if args.devices else [_ordinal(args)]
    on, close = _progress_bar(sys.stderr.isatty())
    request = SessionRequest(args.kernel, grids, Path(args.out), args.backend, ordinals, extra,
                             TuneOptions(budget=args.budget, resume=args.resume), args.cross_check, fleet)
    stop = threading.Event()
    with _stop_on_signals(stop) as caught:
        try:
            result = run_session(request, on, stop)
        finally:
            close()
    report, summary = result.report, result.summary
    signum = caught[0] if caught else signal.SIGINT
    if report.interrupted:
        summary["signal"] = signal.Signals(signum).name
    if args.json:
        emit_json({"command": "tune", **summary})
    else:
        for line in report.left_out:
            print(f"left out {line}", file=sys.stderr)
        for line in report.lost:
            print(f"lost mid-run {line}", file=sys.stderr)
        for d in report.disagreements:
            print(f"disagreement on {d['key']}: devices {d['devices']} chose {d['winners']} "
                  f"({'within' if d['within_noise'] else 'beyond'} the noise band)", file=sys.stderr)
        where = f" on {len(report.workers)} GPUs" if len(report.workers) > 1 else ""
        print(f"tuned {summary['tuned']} keys ({summary['skipped']} skipped){where} into {args.out} in "
              f"{_split(report.seconds)}")
        if summary.get("compiler_seconds") is not None and summary.get("compiled") is not None:
            # compile in the split is what the measuring waited for; the compiler ran ahead of it
            print(f"compiled {summary['compiled']} variants ({summary['compile_cache_hits']} from the cache) in "
                  f"{summary['compiler_seconds']:.1f} s of compiler time over {summary['compile_processes']} processes, "
                  f"ahead of the measuring")
        if report.interrupted:
            print(f"stopped by {summary['signal']}: {len(report.not_reached)} keys not reached "
                  f"(the same command with --resume tunes them)", file=sys.stderr)
    return 128 + signum if report.interrupted else 0


def register(sub: Any) -> None:
    """Add ``tune``."""
    p = add_command(sub, "tune", _tune, "compile, verify and time every variant of a kernel on this GPU; emit artifacts")
    p.add_argument("kernel")
    add_grid_arguments(p)
    p.add_argument("--out", default="tuned", help="folder for the artifacts (default: tuned)")
    p.add_argument("--backend", choices=["cuda", "hip", "simulated"], help="default: the GPU found; 'simulated' is the test backend")
    p.add_argument("--gpu", type=int, default=0, metavar="N", action=_Given,
                   help="the GPU of this host to tune on, by ordinal (default 0)")
    p.add_argument("--device", metavar="N", help="deprecated name of --gpu N (--device names a device spec in explain, "
                   "doctor and predict)")
    p.set_defaults(gpu_given=False)
    p.add_argument("--devices", help="tune on several GPUs: 'all' or ordinals like 0,1 (a worker process each; "
                   "an ordinal may repeat to run two workers on one GPU)")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="tune on every GPU of a Ray cluster (pip install 'flyconfigs[ray]'): alone, a local cluster "
                        "with this machine's GPUs; 'auto' the running cluster; or its address")
    p.add_argument("--target", metavar="DEVICE",
                   help="with --ray: tune on the GPUs that are this device (sm90, sm90:132:NVIDIA H200, H200, …); "
                        "default: the device most of the cluster's GPUs are")
    p.add_argument("--cross-check", action="store_true",
                   help="re-tune every key on a second GPU of the same identity (another node first) and report the "
                        "keys whose winners differ; a key whose GPU has no twin is not re-checked")
    p.add_argument("--budget", type=int, help="at most this many candidates per key (the default is always one)")
    p.add_argument("--resume", action="store_true", help="skip keys already tuned with the same kernel source and toolchain")
