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
    key: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise _Usage(f"key item {pair!r} is not NAME=VALUE")
        key[name] = int(value) if value.lstrip("-").isdigit() else value
    return key


class _Usage(Exception):
    pass


# -- validate ---------------------------------------------------------------------------


def _iter_json_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(p for p in sorted(path.rglob("*.json")) if not p.name.startswith("."))
        elif path.exists():
            files.append(path)
        else:
            raise _Usage(f"{raw}: no such file or directory")
    return files


def _cmd_validate(args: argparse.Namespace) -> int:
    from flyconfigs.schema import parse_artifact, read_document
    from flyconfigs.schema.manifest import MANIFEST_FILE, Manifest

    results = []
    for path in _iter_json_files(args.paths):
        entry: dict[str, Any] = {"file": str(path), "valid": True, "problems": [], "notes": []}
        try:
            data = read_document(path)
            if path.name == MANIFEST_FILE:
                from pydantic import ValidationError

                from flyconfigs.schema.load import validation_problems

                try:
                    Manifest.model_validate(data)
                except ValidationError as exc:
                    from flyconfigs.errors import ArtifactError

                    raise ArtifactError(str(path), validation_problems(exc, data)) from None
            else:
                _, report = parse_artifact(data, str(path))
                entry["notes"] = [f"ignored field of a newer minor: {f}" for f in report.ignored_fields]
                entry["notes"] += [f"migrated from {m}" for m in report.migrated_from]
        except FlyconfigsError as exc:
            problems = getattr(exc, "problems", ())
            entry["valid"] = False
            entry["problems"] = [{"field": p.field, "message": p.message} for p in problems] or [
                {"field": "", "message": str(exc)}
            ]
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
        print(f"{len(results) - bad} valid, {bad} invalid", file=sys.stderr)
    return 1 if bad else 0


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
    rows = []
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
    where = resolution.source
    if resolution.origin:
        where += f" {resolution.origin}" + (f" {resolution.version}" if resolution.version else "")
    borrowed = f", borrowed from {resolution.matched_device.describe()}" if resolution.borrowed and resolution.matched_device else ""
    print(f"=> {config}  [{where}; device {resolution.layer}, key {resolution.key_match}{borrowed}]")
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from flyconfigs.registry import default_resolver
    from flyconfigs.registry.sources import override_directories

    resolver = default_resolver()
    device, how = resolver.current_device()
    problems = resolver.check_all()
    collisions = resolver.collisions()
    packages = resolver.packages()
    real_problems = [p for p in problems if p.kind != "collision"]
    if args.json:
        _emit_json(
            {
                "command": "doctor",
                "device": None if device is None else device.describe(),
                "device_source": how,
                "override_directories": [str(p) for p in override_directories()],
                "packages": [p.__dict__ for p in packages],
                "problems": [p.__dict__ for p in real_problems],
                "collisions": [
                    {"kernel": c.kernel, "key": dict(c.key), "device": c.device.describe(), "winner": c.winner,
                     "shadowed": list(c.shadowed)}
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
            print(f"collision: {c.kernel} {dict(c.key)} on {c.device.describe()}: {c.winner} shadows {', '.join(c.shadowed)}")
        for problem in real_problems:
            print(f"problem: {problem}")
        print("ok" if not real_problems else f"{len(real_problems)} problem(s)")
    return 1 if real_problems else 0


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return int(args.handler(args))
    except _Usage as exc:
        print(f"flyconfigs: error: {exc}", file=sys.stderr)
        return 2
    except FlyconfigsError as exc:
        if args.traceback:
            raise
        print(f"flyconfigs: error: {exc}", file=sys.stderr)
        hint = getattr(exc, "hint", None)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
