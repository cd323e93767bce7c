"""The ``flyconfigs`` command: a thin layer over the library.

Exit status: 0 success, 1 a problem was found (invalid files, a failed build), 2 a
usage error.  Errors are one line on stderr (``--traceback`` shows the whole trace);
``--json`` prints one versioned JSON object on stdout instead of text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flyconfigs.errors import FlyconfigsError

__all__ = ["main"]

JSON_FORMAT = 1
Handler = Callable[[argparse.Namespace], int]


def _emit_json(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"flyconfigs_output": JSON_FORMAT, **payload}, indent=2, sort_keys=True) + "\n")


def _parse_key(pairs: Sequence[str]) -> dict[str, object]:
    from flyconfigs.registry.declarations import parse_key_items

    return dict(parse_key_items(list(pairs)))


class _Usage(Exception):
    pass


# -- validate ---------------------------------------------------------------------------


def _iter_json_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            from flyconfigs.schema.jsonio import json_files_under

            files.extend(json_files_under(path))
        elif os.path.lexists(path):
            files.append(path)
        else:
            raise _Usage(f"{raw}: no such file or directory")
    return files


def _check_package(manifest_path: Path) -> tuple[list[dict[str, str]], list[str]]:
    """The problems the loader would meet in the data package whose manifest this is:
    the manifest itself, every row's file, hash, identity and target, and every winner
    the row's kernel refuses.  Returns (problems, notes)."""
    from flyconfigs.registry.problems import ProblemLog
    from flyconfigs.registry.sources import Source, read_package_folder

    problems = ProblemLog()
    source = Source("override", str(manifest_path.parent), 0)
    package = read_package_folder(manifest_path.parent, None, source, problems)
    notes: list[str] = []
    for entry in package.entries if package is not None else []:
        artifact = entry.load(problems)
        if artifact is not None:
            notes.extend(_config_notes(artifact, str(entry.path), problems))
    found = [{"field": p.where, "message": f"{p.kind}: {p.message}"} for p in problems.problems()]
    return found, notes


def _config_notes(artifact: Any, where: str, problems: Any) -> list[str]:
    """Check the winner with its kernel's declaration when this environment declares
    the kernel (a problem when refused); otherwise say it was not checked."""
    from flyconfigs.errors import UnknownKernelError
    from flyconfigs.registry.declarations import check_config, kernel_declaration
    from flyconfigs.registry.device import DeviceQuery
    from flyconfigs.registry.problems import Problem

    notes = []
    if artifact.from_test_double:
        notes.append("made by a test double (backend simulated): never published or served to a real device")
    try:
        decl = kernel_declaration(artifact.kernel.name)
    except UnknownKernelError as exc:
        return [*notes, f"winner not checked: {exc}"]
    why = check_config(decl, artifact.winner.config, dict(artifact.key), DeviceQuery.of(artifact.device.identity))
    if why is not None:
        problems.report(Problem("invalid-config", where, f"{decl.name} refuses the winner: {why}"))
    return notes


def _cmd_validate(args: argparse.Namespace) -> int:
    from flyconfigs.registry.problems import ProblemLog
    from flyconfigs.schema import parse_artifact, read_document
    from flyconfigs.schema.manifest import MANIFEST_FILE

    results = []
    for path in _iter_json_files(args.paths):
        entry: dict[str, Any] = {"file": str(path), "valid": True, "problems": [], "notes": []}
        try:
            if path.name == MANIFEST_FILE:
                entry["problems"], entry["notes"] = _check_package(path)
            else:
                artifact, report = parse_artifact(read_document(path, schema_bounds_depth=True), str(path))
                entry["notes"] = [f"ignored field of a newer minor: {f}" for f in report.ignored_fields]
                entry["notes"] += [f"migrated from {m}" for m in report.migrated_from]
                log = ProblemLog()
                entry["notes"] += _config_notes(artifact, str(path), log)
                entry["problems"] = [{"field": "winner.config", "message": p.message} for p in log.problems()]
        except FlyconfigsError as exc:
            problems = getattr(exc, "problems", ())
            entry["problems"] = [{"field": p.field, "message": p.message} for p in problems] or [
                {"field": "", "message": str(exc)}
            ]
        entry["valid"] = not entry["problems"]
        results.append(entry)
    bad = sum(not r["valid"] for r in results)
    if args.json:
        _emit_json({"command": "validate", "files": results, "invalid": bad})
    else:
        for r in results:
            for p in r["problems"]:
                print(f"{r['file']}: {p['field'] or '<document>'}: {p['message']}")
            for note in r["notes"]:
                print(f"{r['file']}: note: {note}")
        if results:
            print(f"{len(results) - bad} valid, {bad} invalid", file=sys.stderr)
        else:
            print(f"no artifact or manifest files found in {', '.join(args.paths)}", file=sys.stderr)
    return 1 if bad or not results else 0


# -- schema -----------------------------------------------------------------------------


def _cmd_schema(args: argparse.Namespace) -> int:
    from flyconfigs.schema.spec import load_spec

    try:
        spec = load_spec(args.kind, args.version) if args.version else load_spec(args.kind)
    except KeyError as exc:
        raise _Usage(str(exc.args[0])) from None
    sys.stdout.write(json.dumps(spec, indent=2, sort_keys=True) + "\n")
    return 0


# -- list, show, explain, doctor ---------------------------------------------------------


def _cmd_list(args: argparse.Namespace) -> int:
    from flyconfigs.registry import default_resolver

    packages = default_resolver().packages()
    if args.json:
        _emit_json({"command": "list", "packages": [p.__dict__ for p in packages]})
        return 0
    if not packages:
        print("no flyconfigs data packages installed")
    for p in packages:
        print(f"{p.distribution} {p.version}  target {p.target}  schema {p.schema_version}  {p.artifacts} artifacts")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from flyconfigs.registry import default_resolver, kernel_declaration

    decl = kernel_declaration(args.kernel)
    rows: list[dict[str, Any]] = []
    for entry in default_resolver().all_entries():
        if entry.kernel != decl.name:
            continue
        rows.append(
            {
                "key": entry.key,
                "device": entry.device.describe(),
                "source": entry.source.name,
                "version": entry.source.version,
                "file": str(entry.path),
            }
        )
    axes = [{"name": a.name, "kind": a.kind.__name__, "ordinal": a.ordinal} for a in decl.key_axes]
    if args.json:
        _emit_json({"command": "show", "kernel": decl.name, "version": decl.version, "axes": axes, "artifacts": rows})
        return 0
    print(f"{decl.name} (family version {decl.version}); key: " + ", ".join(
        f"{a['name']}{' (ordinal)' if a['ordinal'] else ''}" for a in axes
    ))
    for r in rows:
        key = " ".join(f"{k}={v}" for k, v in r["key"].items())
        print(f"  {key}  on {r['device']}  from {r['source']} {r['version'] or ''}".rstrip())
    if not rows:
        print("  no artifacts installed; every key gets the default heuristic")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from flyconfigs.registry import default_resolver

    resolution, steps = default_resolver().explain(args.kernel, _parse_key(args.key), args.device)
    if args.json:
        _emit_json(
            {
                "command": "explain",
                "resolution": resolution.as_json(),
                "steps": [{"looked_for": s.looked_for, "outcome": s.outcome} for s in steps],
            }
        )
        return 0
    for number, step in enumerate(steps, 1):
        print(f"{number}. {step.looked_for}: {step.outcome}")
    config = " ".join(f"{k}={v}" for k, v in resolution.config.items())
    where: str = resolution.source
    if resolution.origin:
        where += f" {resolution.origin}" + (f" {resolution.version}" if resolution.version else "")
    borrowed = f", borrowed from {resolution.matched_device.describe()}" if resolution.borrowed and resolution.matched_device else ""
    print(f"=> {config}  [{where}; device {resolution.layer}, key {resolution.key_match}{borrowed}]")
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from flyconfigs.registry import declarations, default_resolver
    from flyconfigs.registry.sources import PACKAGES_ENV, override_directories

    resolver = default_resolver()
    device, how = resolver.current_device()
    problems = resolver.check_all()
    collisions = resolver.collisions()
    packages = resolver.packages()
    real_problems = [p for p in [*problems, *declarations.PROBLEMS.problems()] if p.kind != "collision"]
    unexpected = [c for c in collisions if not c.expected]
    warnings = []
    if device is None:
        warnings.append(f"no device known ({how}): every call gets the default heuristic")
    elif not resolver.sources_for(device.arch):
        warnings.append(f"nothing installed serves {device.arch}: every call gets the default heuristic")
    for c in unexpected:
        warnings.append(f"unexpected collision: {c.winner} shadows {', '.join(c.shadowed)}; "
                        f"rank the packages with {PACKAGES_ENV} to choose")
    if args.json:
        _emit_json(
            {
                "command": "doctor",
                "device": None if device is None else device.describe(),
                "device_source": how,
                "override_directories": [str(p) for p in override_directories()],
                "packages": [p.__dict__ for p in packages],
                "problems": [p.__dict__ for p in real_problems],
                "warnings": warnings,
                "collisions": [
                    {"kernel": c.kernel, "key": dict(c.key), "device": c.device.describe(), "winner": c.winner,
                     "shadowed": list(c.shadowed), "expected": c.expected}
                    for c in collisions
                ],
            }
        )
    else:
        print(f"device: {device.describe() if device else 'unknown'} ({how})")
        for folder in override_directories():
            print(f"override directory: {folder}{'' if folder.is_dir() else ' (missing)'}")
        for p in packages:
            print(f"package: {p.distribution} {p.version} target {p.target}, {p.artifacts} artifacts")
        for c in collisions:
            print(f"collision: {c.kernel} {dict(c.key)} on {c.device.describe()}: {c.winner} shadows "
                  f"{', '.join(c.shadowed)}{'' if c.expected else ' (unexpected)'}")
        for problem in real_problems:
            print(f"problem: {problem}")
        for warning in warnings:
            print(f"warning: {warning}")
        count = len(real_problems) + len(warnings)
        print("ok" if not count else f"{len(real_problems)} problem(s), {len(warnings)} warning(s)")
    return 1 if real_problems or warnings else 0


# -- flydsl -----------------------------------------------------------------------------


def _cmd_flydsl_import(args: argparse.Namespace) -> int:
    from flyconfigs.schema.flydsl import import_flydsl_file

    out = Path(args.out)
    for path in _iter_json_files(args.paths):
        artifact = import_flydsl_file(path)
        from flyconfigs.schema import write_atomic

        target = write_atomic(out / artifact.file_name(), artifact.to_json_bytes())
        print(f"{path} -> {target}")
    return 0


def _cmd_flydsl_export(args: argparse.Namespace) -> int:
    from flyconfigs.schema import load_artifact
    from flyconfigs.schema.flydsl import write_flydsl

    for path in _iter_json_files(args.paths):
        print(f"{path} -> {write_flydsl(load_artifact(path), args.out)}")
    return 0


# -- publish ----------------------------------------------------------------------------


def _print_results(results: list[Any], as_json: bool) -> None:
    if as_json:
        _emit_json(
            {
                "command": "publish",
                "packages": [
                    {"distribution": r.distribution, "version": r.version, "artifacts": r.artifacts,
                     "files": [str(f) for f in r.files], "uploaded_to": r.uploaded_to}
                    for r in results
                ],
            }
        )
        return
    for r in results:
        for f in r.files:
            print(f"built {f}")
        if r.uploaded_to:
            print(f"uploaded {r.distribution} {r.version} to {r.uploaded_to}")


def _cmd_publish(args: argparse.Namespace) -> int:
    from flyconfigs.registry.publish import publish, publish_all

    if args.all:
        if args.target or args.version:
            raise _Usage("--all takes each target and version from ARTIFACT_DIR/<target>/VERSION")
        results = publish_all(args.artifact_dir, args.out, args.upload)
    else:
        if not args.target or not args.version:
            raise _Usage("publish needs --target and --version (or --all)")
        results = [publish(args.artifact_dir, args.target, args.version, args.out, args.upload, args.index_url)]
    _print_results(results, args.json)
    return 0


# -- tune -------------------------------------------------------------------------------


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
        elif event in ("key", "skip"):
            key = " ".join(f"{k}={v}" for k, v in data["key"].items())
            if event == "key":
                r = data["result"]
                state["best"] = r.winner_us
                text = f"{key}: {r.candidates} candidates, winner {r.winner_us:.2f} us (default {r.default_us:.2f} us)"
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


def _device_list(text: str, backend: str | None) -> list[int]:
    if text == "all":
        if backend == "simulated":
            from flyconfigs.tuner.simulated import SIMULATED_ORDINALS

            return list(SIMULATED_ORDINALS)
        from flyconfigs.gpu import device_count

        count = device_count(backend)
        if count < 1:
            raise _Usage("--devices all: no GPU found")
        return list(range(count))
    try:
        ordinals = [int(part) for part in text.split(",")]
    except ValueError:
        raise _Usage(f"--devices takes 'all' or GPU ordinals like 0,1,2; got {text!r}") from None
    if not ordinals or any(o < 0 for o in ordinals):
        raise _Usage(f"--devices takes non-negative ordinals; got {text!r}")
    return ordinals


def _cmd_tune(args: argparse.Namespace) -> int:
    from flyconfigs.registry import kernel_declaration
    from flyconfigs.tuner.grid import parse_grids
    from flyconfigs.tuner.run import TuneOptions, tune
    from flyconfigs.tuner.worker import Worker, available_cpus

    spec = kernel_declaration(args.kernel)
    if not hasattr(spec, "space"):
        raise _Usage(f"kernel {args.kernel!r} declares no tunable space")
    dtypes = [d for item in args.dtype or [] for d in item.split(",")] or None
    keys = parse_grids(args.key_grid or ["perf"], dtypes)
    if args.budget is not None and args.budget < 1:
        raise _Usage("--budget must be at least 1")
    ordinals = _device_list(args.devices, args.backend) if args.devices else [args.device]
    workers: list[Worker] = []
    try:
        if args.backend == "simulated":
            from flyconfigs.tuner.simulated import SimulatedToolchain

            workers = [Worker("flyconfigs.tuner.simulated:SimulatedMeasurer", {"ordinal": o}) for o in ordinals]
            toolchain: Any = SimulatedToolchain()
        else:
            from flyconfigs.schema.models import Device
            from flyconfigs.tuner.toolchain import GPUToolchain

            for ordinal in ordinals:
                workers.append(Worker("flyconfigs.tuner.measure_gpu:GPUMeasurer", {"backend": args.backend, "ordinal": ordinal}))
            vendor = Device.model_validate(workers[0].device).vendor
            toolchain = GPUToolchain("hip" if vendor == "amd" else "cuda", available_cpus())
        on, close = _progress_bar(sys.stderr.isatty())
        try:
            report = tune(spec, keys, Path(args.out), workers, toolchain,
                          TuneOptions(budget=args.budget, resume=args.resume), on, cross_check=args.cross_check)
        finally:
            close()
            getattr(toolchain, "close", lambda: None)()
    finally:
        for worker in workers:
            worker.close()
    summary = {
        "device": report.device.model_dump(mode="json"),
        "keys": len(report.results),
        "tuned": sum(not r.skipped for r in report.results),
        "skipped": sum(r.skipped for r in report.results),
        "seconds": report.seconds,
        "worker_restarts": report.worker_restarts,
        "workers": len(workers),
        "devices": ordinals,
        "disagreements": report.disagreements,
        "compiled": getattr(toolchain, "compiled", None),
        "compile_cache_hits": getattr(toolchain, "cached", None),
        "artifacts": [str(r.path) for r in report.results if r.path],
    }
    if args.json:
        _emit_json({"command": "tune", **summary})
    else:
        for d in report.disagreements:
            print(f"disagreement on {d['key']}: devices {d['devices']} chose {d['winners']} "
                  f"({'within' if d['within_noise'] else 'beyond'} the noise band)", file=sys.stderr)
        print(f"tuned {summary['tuned']} keys ({summary['skipped']} skipped) into {args.out} in {report.seconds['total']:.1f} s "
              f"(compile {report.seconds['compile']:.1f} s, verify {report.seconds['verify']:.1f} s, time {report.seconds['time']:.1f} s)")
    return 0


# -- the parser -------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flyconfigs", description="Tuned GPU-kernel configurations.")
    parser.add_argument("--traceback", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler: Handler, help_text: str, json_flag: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if json_flag:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(handler=handler)
        return p

    p = add("validate", _cmd_validate, "check artifact and manifest files (folders are searched)")
    p.add_argument("paths", nargs="+", metavar="PATH")

    p = add("schema", _cmd_schema, "print a JSON Schema of the format", json_flag=False)
    p.add_argument("kind", nargs="?", default="artifact", choices=["artifact", "manifest"])
    p.add_argument("--version", help="schema version (default: the current one)")

    add("list", _cmd_list, "list installed data packages")

    p = add("show", _cmd_show, "show a kernel's key axes and the artifacts installed for it")
    p.add_argument("kernel")

    p = add("explain", _cmd_explain, "which config a call would get, and why, step by step")
    p.add_argument("kernel")
    p.add_argument("key", nargs="+", metavar="AXIS=VALUE")
    p.add_argument("--device", help="device spec (as FLYCONFIGS_DEVICE); default: the current device")

    add("doctor", _cmd_doctor, "check the device, sources, artifacts and collisions")

    fly = sub.add_parser("flydsl", help="import or export FlyDSL offline autotune artifacts")
    fsub = fly.add_subparsers(dest="flydsl_command", required=True, metavar="ACTION")
    p = fsub.add_parser("import", help="FlyDSL files -> flyconfigs artifacts")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--out", required=True, help="folder for the artifacts")
    p.set_defaults(handler=_cmd_flydsl_import)
    p = fsub.add_parser("export", help="flyconfigs artifacts -> FlyDSL files")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--out", required=True, help="folder for the FlyDSL files")
    p.set_defaults(handler=_cmd_flydsl_export)

    p = add("publish", _cmd_publish, "build (and upload) a flyconfigs-<target> data package")
    p.add_argument("artifact_dir", metavar="ARTIFACT_DIR")
    p.add_argument("--target", help="the GPU target, e.g. gfx942 or sm90")
    p.add_argument("--version", help="the release's PEP 440 version")
    p.add_argument("--out", default="dist", help="folder for the sdist and wheel (default: dist)")
    p.add_argument("--upload", metavar="INDEX_URL", help="upload with twine to this index (credentials from TWINE_*)")
    p.add_argument("--index-url", help="the index's simple API for the version check (default: INDEX_URL/simple/)")
    p.add_argument("--all", action="store_true", help="publish every ARTIFACT_DIR/<target>/ at its VERSION file")
    p = add("tune", _cmd_tune, "compile, verify and time every variant of a kernel on this GPU; emit artifacts")
    p.add_argument("kernel")
    p.add_argument("--key-grid", action="append", metavar="GRID",
                   help="'M=1,16 N=4096 dtype=bf16', @FILE, or 'perf' (the default: the benchmark grid); repeatable")
    p.add_argument("--dtype", action="append", help="dtypes for grids that name none (comma-separated)")
    p.add_argument("--out", default="tuned", help="folder for the artifacts (default: tuned)")
    p.add_argument("--backend", choices=["cuda", "hip", "simulated"], help="default: the GPU found; 'simulated' is the test backend")
    p.add_argument("--device", type=int, default=0, help="GPU ordinal (default 0)")
    p.add_argument("--devices", help="tune on several GPUs: 'all' or ordinals like 0,1 (a worker process each; "
                   "an ordinal may repeat to run two workers on one GPU)")
    p.add_argument("--cross-check", action="store_true",
                   help="re-tune every key on a second identical GPU and report winners that differ")
    p.add_argument("--budget", type=int, help="at most this many candidates per key (the default is always one)")
    p.add_argument("--resume", action="store_true", help="skip keys already tuned with the same kernel source and toolchain")
    return parser


def _usage_errors() -> tuple[type[BaseException], ...]:
    from flyconfigs.errors import InvalidDeviceError, InvalidKeyError, UnknownKernelError

    return (_Usage, InvalidKeyError, UnknownKernelError, InvalidDeviceError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 success, 1 a problem found, 2 a
    usage error, 130 interrupted)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    words = list(sys.argv[1:] if argv is None else argv)
    traceback_wanted = "--traceback" in words
    words = [w for w in words if w != "--traceback"]
    parser = _parser()
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:
        return int(exc.code or 0)
    args.traceback = traceback_wanted
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        if traceback_wanted:
            raise
        print("flyconfigs: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (FlyconfigsError, OSError) as exc:
        if traceback_wanted:
            raise
        usage = isinstance(exc, _usage_errors())
        print(f"flyconfigs: error: {_one_line(exc)}", file=sys.stderr)
        hint = getattr(exc, "hint", None)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return 2 if usage else 1
    except _Usage as exc:
        print(f"flyconfigs: error: {exc}", file=sys.stderr)
        return 2


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.strerror or type(exc).__name__}: {os.fsdecode(exc.filename)}"
    else:
        text = str(exc) or type(exc).__name__
    lines = text.splitlines()
    return lines[0] + (f" (+{len(lines) - 1} more lines; --traceback for all)" if len(lines) > 1 else "")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
