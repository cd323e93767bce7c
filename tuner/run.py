"""The tuning run: every key of a grid on one or more measuring workers, in parallel,
each key tuned by a :class:`~flyconfigs.tuner.key.KeyTuner` and its artifact emitted,
with compilation queued ahead so that later keys compile while the GPU measures this one;
optionally cross-checked, each key re-tuned on a second device.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flyconfigs.errors import TuneError
from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.schema.canonical import same_value
from flyconfigs.schema.models import Artifact, Device, DeviceIdentity
from flyconfigs.tuner import emit
from flyconfigs.tuner.key import KeyTuner, candidate_configs
from flyconfigs.tuner.options import KeyResult, Progress, Toolchain, TuneOptions
from flyconfigs.tuner.worker import Worker

__all__ = ["KeyResult", "Progress", "TuneOptions", "TuneReport", "add_seconds", "disagreements", "spread_cross_checks",
           "tune"]


@dataclass
class TuneReport:
    """Every key's result and where the time went."""

    device: Device
    results: list[KeyResult] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: {"compile": 0.0, "verify": 0.0, "time": 0.0, "total": 0.0})
    worker_restarts: int = 0
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    """Where it tuned, one entry per worker: ``HOST GPU ORDINAL`` (a fleet adds the node)."""
    left_out: list[str] = field(default_factory=list)
    """GPUs a fleet did not tune on, each with the reason (not the target, failed to start)."""
    lost: list[str] = field(default_factory=list)
    """Workers a fleet lost mid-run, each with what happened; their keys went back in the queue."""
    interrupted: bool = False
    """The run was stopped (Ctrl-C, a termination signal) before its last key."""
    not_reached: list[dict[str, Any]] = field(default_factory=list)
    """The keys an interrupted run wrote no artifact for, in the order asked."""


def tune(
    kernel: TunableKernel,
    keys: Sequence[dict[str, Any]],
    out: Path,
    worker: Worker | Sequence[Worker],
    toolchain: Toolchain,
    options: TuneOptions = TuneOptions(),
    progress: Progress | None = None,
    cross_check: bool = False,
    stop: threading.Event | None = None,
) -> TuneReport:
    """Tune every key of ``keys`` for ``kernel``; one artifact per key in ``out``.

    With several workers (one per GPU) keys are handed out dynamically — a worker takes
    the next key when it finishes one — and every artifact goes through the same atomic
    emit.  ``cross_check`` then re-tunes every key on a second worker whose device has
    the same identity and reports the keys whose winners differ (``report.disagreements``).
    Setting ``stop`` (a signal handler's way) ends the run at the next candidate or key,
    a key in flight left unwritten: it returns with ``report.interrupted`` set, the
    results and phase times of the keys it wrote, and the others in
    ``report.not_reached`` (``resume`` tunes them).  A ``KeyboardInterrupt`` (Ctrl-C
    where the caller installed no handler) ends it the same way, at whatever point it
    arrives; a key whose artifact it had just written may then be listed as not reached.
    Raises :class:`TuneError` for an unusable ``out`` or key."""
    workers = [worker] if isinstance(worker, Worker) else list(worker)
    if not workers:
        raise TuneError("no worker to tune on")
    emit.check_writable(out)
    checked = [kernel.check_key(k) for k in keys]
    devices = [Device.model_validate(w.device) for w in workers]
    report = TuneReport(devices[0], workers=[f"{emit.host()} GPU {d.ordinal if d.ordinal is not None else 0}" for d in devices])
    notify = _locked(progress or (lambda event, data: None), stop)
    tuners = [KeyTuner(kernel, toolchain, w, d, options, notify=notify) for w, d in zip(workers, devices, strict=True)]
    versions, source_sha = tuners[0].versions, tuners[0].source_sha
    started = time.perf_counter()
    notify("start", {"keys": len(checked), "device": ", ".join(sorted({d.identity.describe() for d in devices})),
                     "workers": len(workers)})
    results: dict[int, KeyResult] = {}
    winners: dict[int, list[tuple[int, Artifact]]] = {}
    todo: queue.Queue[int] = queue.Queue()
    for index in range(len(checked)):
        todo.put(index)
    lock = threading.Lock()
    no_more_keys = threading.Event()  # a worker failed or the run was stopped

    resumed: dict[int, bool] = {}

    def tuned_before(index: int, identity: DeviceIdentity) -> bool:
        # --resume's check; read once a key for the first device's identity, which both
        # the compile queue and the workers ask about.
        if not options.resume:
            return False
        shared = identity == devices[0].identity
        if shared and index in resumed:
            return resumed[index]
        found = emit.already_tuned(out, kernel.name, checked[index], identity, source_sha, versions)
        if shared:
            resumed[index] = found
        return found

    def run_worker(slot: int) -> None:
        while not no_more_keys.is_set():
            try:
                index = todo.get_nowait()
            except queue.Empty:
                return
            key = checked[index]
            if tuned_before(index, devices[slot].identity):
                with lock:
                    results[index] = KeyResult(key, None, skipped=True)
                notify("skip", {"key": key})
                continue
            result, artifact = tuners[slot].tune(key)
            with lock:
                if report.interrupted:  # the report is made: a key finished after it is not written
                    return
                result.path = emit.write_artifact(out, artifact)
                add_seconds(report, result)
                results[index] = result
                winners.setdefault(index, []).append((slot, artifact))
            notify("key", {"key": key, "result": result})

    def recheck(slot: int) -> None:
        for index in pinned[slot]:
            if no_more_keys.is_set():
                return
            result, artifact = tuners[slot].tune(checked[index])
            with lock:
                if report.interrupted:
                    return
                add_seconds(report, result)
                winners[index].append((slot, artifact))
            notify("cross-check", {"key": checked[index]})

    def queue_compiles() -> None:
        # Every key is queued for the first worker's device (the run's devices share one arch).
        try:
            for index, key in enumerate(checked):
                if no_more_keys.is_set():
                    return
                if tuned_before(index, devices[0].identity):
                    continue
                toolchain.compile_ahead(kernel, key, candidate_configs(kernel, key, devices[0], options.budget), devices[0])
        except Exception:  # noqa: BLE001 - the key's own compile_all meets the same error and reports it
            return

    ahead = threading.Thread(target=queue_compiles, name="flyconfigs-compile-ahead", daemon=True)
    if len({d.arch for d in devices}) == 1:
        ahead.start()
    pinned: list[list[int]] = []
    try:
        _run_all(run_worker, len(workers), no_more_keys)
        if cross_check and len(workers) > 1:
            pinned = spread_cross_checks({i: found[0][0] for i, found in winners.items()}, [d.identity for d in devices])
            _run_all(recheck, len(workers), no_more_keys)
    except KeyboardInterrupt:
        with lock:
            no_more_keys.set()
            report.interrupted = True
            report.not_reached = [checked[i] for i in range(len(checked)) if i not in results]
    finally:
        no_more_keys.set()
        if ahead.is_alive():
            ahead.join()
    with lock:
        if cross_check and len(workers) > 1:
            report.disagreements = disagreements(checked, winners)
        report.results = [results[i] for i in sorted(results)]
    report.seconds["total"] = time.perf_counter() - started
    report.worker_restarts = sum(w.restarts for w in workers)
    return report


def add_seconds(report: TuneReport, result: KeyResult) -> None:
    """Add one key's phase times to the run's."""
    for name, value in result.seconds.items():
        report.seconds[name] = report.seconds.get(name, 0.0) + value


def spread_cross_checks(first: dict[int, int], identities: Sequence[Any], nodes: Sequence[str] | None = None,
                        alive: Sequence[bool] | None = None) -> list[list[int]]:
    """For each key (tuned first on worker ``first[key]``), the worker that re-tunes it:
    another worker of the same device identity (still ``alive``, when that is given).

    The checks spread as evenly as that rule allows: the workers of one identity get
    their keys' count divided among them, differing by one at most, except that a worker
    can check only the keys it did not tune first (one that tuned most of them first
    checks all the others, and the rest are divided among its twins).  Within that, keys
    go to a worker on another node when ``nodes`` names one with room.  Keys with no twin
    are not re-checked."""
    count = len(identities)
    usable = [alive is None or alive[s] for s in range(count)]
    pinned: list[list[int]] = [[] for _ in identities]
    groups: dict[int, list[int]] = {}
    for slot in range(count):
        if usable[slot]:
            groups.setdefault(next(s for s in range(count) if identities[s] == identities[slot]), []).append(slot)
    for group in groups.values():
        keys = [i for i in sorted(first) if identities[first[i]] == identities[group[0]]
                and any(s != first[i] for s in group)]
        own = {s: sum(1 for i in keys if first[i] == s) for s in group}
        target = _even_targets(len(keys), group, {s: len(keys) - own[s] for s in group}, own)
        where = _place_checks(keys, first, group, target, nodes)
        for index, slot in where.items():
            pinned[slot].append(index)
    for chosen in pinned:
        chosen.sort()
    return pinned


def _even_targets(total: int, group: list[int], capacity: dict[int, int], own: dict[int, int]) -> dict[int, int]:
    """``total`` checks divided over ``group`` as evenly as each worker's ``capacity``
    (the keys it did not tune first) allows; an extra check goes to the workers that
    tuned the fewest keys first.  Any two workers tuned first on different workers can
    share every key, so capacities are the only limit and the targets can be met."""
    target: dict[int, int] = {}
    left, open_ = total, list(group)
    while open_:
        base = left // len(open_)
        full = [s for s in open_ if capacity[s] <= base]
        if not full:
            extra = left - base * len(open_)
            ranked = sorted(open_, key=lambda s: (own[s], s))
            target.update({s: base + (1 if n < extra else 0) for n, s in enumerate(ranked)})
            break
        for s in full:
            target[s] = capacity[s]
            left -= capacity[s]
            open_.remove(s)
    return target


def _place_checks(keys: list[int], first: dict[int, int], group: list[int], target: dict[int, int],
                  nodes: Sequence[str] | None) -> dict[int, int]:
    """Each key to a worker of ``group`` other than its first, at most ``target`` each:
    greedily (another node first), then moved along augmenting paths until no worker
    is over its target."""
    def allowed(index: int) -> list[int]:
        others = [s for s in group if s != first[index]]
        if nodes is None:
            return others
        return sorted(others, key=lambda s: nodes[s] == nodes[first[index]])  # another node first

    load = dict.fromkeys(group, 0)
    where: dict[int, int] = {}
    for index in keys:
        choices = allowed(index)
        room = [s for s in choices if load[s] < target[s]]
        elsewhere = [s for s in room if nodes is not None and nodes[s] != nodes[first[index]]]
        slot = min(elsewhere or room or choices, key=lambda s: (load[s], s))
        where[index] = slot
        load[slot] += 1
    for start in group:
        while load[start] > target[start]:
            parent: dict[int, tuple[int, int]] = {}
            frontier, end = [start], None
            while frontier and end is None:
                step = []
                for u in frontier:
                    for index in (i for i, s in where.items() if s == u):
                        for v in allowed(index):
                            if v != start and v not in parent:
                                parent[v] = (u, index)
                                if load[v] < target[v]:
                                    end = v
                                    break
                                step.append(v)
                        if end is not None:
                            break
                    if end is not None:
                        break
                frontier = step
            if end is None:
                break
            v = end
            while v != start:
                u, index = parent[v]
                where[index] = v
                load[v] += 1
                load[u] -= 1
                v = u
    return where


def disagreements(keys: Sequence[dict[str, Any]], found: dict[int, list[tuple[int, Artifact]]]) -> list[dict[str, Any]]:
    """The keys whose first two tunings chose different winners, in key order."""
    return [_disagreement(keys[i], pair) for i, pair in sorted(found.items())
            if len(pair) > 1 and not same_value(pair[0][1].winner.config, pair[1][1].winner.config)]


def _run_all(target: Callable[[int], None], count: int, stop: threading.Event | None = None) -> None:
    """Run ``target(slot)`` for every slot, one thread each.  The first failure sets
    ``stop`` so the other workers take no new key; every failure is reported."""
    if count == 1:
        target(0)
        return
    errors: list[BaseException] = []

    def guarded(slot: int) -> None:
        try:
            target(slot)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            errors.append(exc)
            if stop is not None:
                stop.set()

    threads = [threading.Thread(target=guarded, args=(slot,), name=f"flyconfigs-tune-{slot}") for slot in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if len(errors) == 1 or any(not isinstance(e, Exception) for e in errors):
        raise next((e for e in errors if not isinstance(e, Exception)), errors[0])
    if errors:
        lines = "; ".join(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}" for e in errors)
        raise TuneError(f"{len(errors)} workers failed: {lines}") from errors[0]


def _locked(progress: Progress, stop: threading.Event | None = None) -> Progress:
    """``progress`` called under a lock; once ``stop`` is set, every call raises
    :class:`KeyboardInterrupt` instead, at a point where nothing is half written.  A
    ``key`` event, which reports a key already written, is still passed on first."""
    lock = threading.Lock()

    def call(event: str, data: dict[str, Any]) -> None:
        stopped = stop is not None and stop.is_set()
        if stopped and event != "key":
            raise KeyboardInterrupt
        with lock:
            progress(event, data)
        if stopped:
            raise KeyboardInterrupt

    return call


def _disagreement(key: dict[str, Any], found: list[tuple[int, Artifact]]) -> dict[str, Any]:
    (_, a), (_, b) = found[0], found[1]
    ta, tb = a.winner.timing, b.winner.timing
    band = max(ta.noise, tb.noise, 0.01) if ta and tb else None
    return {
        "key": key,
        "devices": [a.device.ordinal, b.device.ordinal],
        "hosts": [a.provenance.host, b.provenance.host],
        "winners": [dict(a.winner.config), dict(b.winner.config)],
        "medians_us": [ta.median_us if ta else None, tb.median_us if tb else None],
        "within_noise": bool(ta and tb and band is not None and abs(ta.median_us - tb.median_us) <= band * min(ta.median_us, tb.median_us)),
    }
