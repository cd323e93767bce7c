"""``flyconfigs flydsl import|export``: FlyDSL's offline autotune files, byte-compatible."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from flyconfigs.cli._common import Usage, emit_json, iter_json_files
from flyconfigs.cli._reports import existing_paths, render_import
from flyconfigs.errors import ArtifactError

__all__ = ["add_import_options", "import_files", "register"]


def _report(args: argparse.Namespace, command: str, done: list[dict[str, str]], failed: list[dict[str, str]]) -> int:
    if not done and not failed:
        # Folders named that hold no file are a problem found (exit 1), as for validate.
        print(f"flyconfigs: error: no *.json file in {', '.join(args.paths)}", file=sys.stderr)
    if args.json:
        emit_json({"command": command, "files": done, "failed": failed})
    else:
        for row in done:
            print(f"{row['from']} -> {row['to']}")
        for row in failed:
            print(f"flyconfigs: error: {row['error']}", file=sys.stderr)
    return 1 if failed or not done else 0


def _kernel_map(items: list[str] | None) -> dict[str, str]:
    """``--kernel FLYDSL_NAME=KERNEL`` values; :class:`Usage` for one of another form."""
    mapped: dict[str, str] = {}
    for item in items or []:
        name, sep, kernel = item.partition("=")
        if not sep or not name or not kernel:
            raise Usage(f"--kernel {item!r}: expected FLYDSL_NAME=KERNEL")
        mapped[name] = kernel
    return mapped


def import_files(args: argparse.Namespace) -> int:
    """FlyDSL files -> artifacts in ``args.out`` (``flydsl import``, also ``import flydsl``).
    A FlyDSL kernel ``X`` is ``flydsl.X`` unless ``--kernel X=KERNEL`` names a kernel of
    another name whose configs these are."""
    from flyconfigs.adapters.importing import write_imports

    report = write_imports("flydsl", existing_paths(args.paths), args.out,
                           flydsl_kernels=_kernel_map(getattr(args, "kernel", None)))
    return render_import(report, args.paths, args.json)


def _export(args: argparse.Namespace) -> int:
    from flyconfigs.schema.flydsl import write_flydsl
    from flyconfigs.schema.load import load_artifact_whole

    done, failed = [], []
    for path in iter_json_files(args.paths):
        try:
            artifact = load_artifact_whole(path, "export it")
            done.append({"from": str(path), "to": str(write_flydsl(artifact, args.out))})
        except ArtifactError as exc:
            failed.append({"from": str(path), "error": str(exc)})
    return _report(args, "flydsl export", done, failed)


def add_import_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``flydsl import`` (and ``import flydsl``) beside the paths and ``--out``."""
    parser.add_argument("--kernel", action="append", metavar="FLYDSL_NAME=KERNEL",
                        help="import the files of FlyDSL's FLYDSL_NAME as the declared kernel KERNEL (default: "
                             "flydsl.FLYDSL_NAME, FlyDSL's namespace); repeatable")


def register(sub: Any) -> None:
    """Add ``flydsl import`` and ``flydsl export``."""
    fly = sub.add_parser("flydsl", help="import or export FlyDSL offline autotune artifacts")
    actions = fly.add_subparsers(dest="flydsl_command", required=True, metavar="ACTION")
    for name, handler, text, out in (("import", import_files, "FlyDSL files -> flyconfigs artifacts", "folder for the artifacts"),
                                     ("export", _export, "flyconfigs artifacts -> FlyDSL files", "folder for the FlyDSL files")):
        p = actions.add_parser(name, help=text, description=text)
        p.add_argument("paths", nargs="+", metavar="PATH")
        p.add_argument("--out", required=True, help=out)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "import":
            add_import_options(p)
        p.set_defaults(handler=handler)
