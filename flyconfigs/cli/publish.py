"""``flyconfigs publish``: build (and upload) data packages, the official
``flyconfigs-<target>`` or one under any distribution name (``--name``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from flyconfigs.cli._common import Usage, add_command, emit_json

__all__ = ["register"]


def _print_results(results: list[Any], as_json: bool) -> None:
    if as_json:
        emit_json(
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


def _check_arguments(args: argparse.Namespace) -> None:
    """The folder and version named on the line, checked as usage (exit 2) before any
    build starts: what they hold is the library's to judge (exit 1)."""
    from packaging.version import InvalidVersion, Version

    if args.index_url is not None and args.upload is None:
        raise Usage("--index-url is the index an upload is checked against; it needs --upload")
    if not Path(args.artifact_dir).is_dir():
        raise Usage(f"{args.artifact_dir}: no such folder")
    if args.version is not None:
        try:
            Version(args.version)
        except InvalidVersion:
            raise Usage(f"--version {args.version!r} is not a valid PEP 440 version") from None


def _publish(args: argparse.Namespace) -> int:
    from flyconfigs.publish.build import publish, publish_all

    _check_arguments(args)
    if args.all:
        if args.target or args.version or args.name:
            raise Usage("--all takes each target and version from ARTIFACT_DIR/<target>/VERSION and publishes the "
                        "official packages (no --name)")
        results = publish_all(args.artifact_dir, args.out, args.upload, args.index_url)
    else:
        if not args.target or not args.version:
            raise Usage("publish needs --target and --version (or --all)")
        from flyconfigs.publish.layout import name_problem, target_problem

        why = target_problem(args.target) or (name_problem(args.name, args.target) if args.name is not None else None)
        if why is not None:
            raise Usage(why)
        results = [publish(args.artifact_dir, args.target, args.version, args.out, args.upload, args.index_url,
                           name=args.name)]
    _print_results(results, args.json)
    return 0


def register(sub: Any) -> None:
    """Add ``publish``."""
    p = add_command(sub, "publish", _publish, "build (and upload) a data package")
    p.add_argument("artifact_dir", metavar="ARTIFACT_DIR")
    p.add_argument("--name", metavar="DIST",
                   help="the distribution name to publish under (default: the official flyconfigs-<target>)")
    p.add_argument("--target", help="the GPU target, e.g. gfx942 or sm90")
    p.add_argument("--version", help="the release's PEP 440 version")
    p.add_argument("--out", default="dist", help="folder for the sdist and wheel (default: dist)")
    p.add_argument("--upload", metavar="INDEX_URL", help="upload with twine to this index (credentials from TWINE_*)")
    p.add_argument("--index-url", help="the index's simple API for the version check (default: INDEX_URL/simple/)")
    p.add_argument("--all", action="store_true", help="publish every ARTIFACT_DIR/<target>/ at its VERSION file")
