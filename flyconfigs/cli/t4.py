"""``flyconfigs t4 export`` and ``flyconfigs t4 import``: measured artifacts as Kernel
Tuner's T4 results files, and T4 files (flyconfigs' own or Kernel Tuner's) as artifacts
(:mod:`flyconfigs.adapters.t4`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flyconfigs.cli._common import Usage, add_command, emit_json, parse_key
from flyconfigs.cli._reports import existing_paths, render_import
from flyconfigs.errors import ArtifactError

if TYPE_CHECKING:
    from flyconfigs.schema.models import Artifact

__all__ = ["register"]

SUFFIX = ".t4.json"
"""What ends a T4 file's name: the artifact's file name's stem, then this."""


def _measured_artifacts(raw_paths: list[str], skipped: list[dict[str, str]]) -> list[tuple[Artifact, Path]]:
    """Every artifact the paths name, with its file: a single artifact file as it is; a
    folder's artifacts, single files and packs' rows (candidates from the measurements);
    a pack file's rows.  What cannot be read is added to ``skipped``."""
    from flyconfigs.schema.jsonio import read_document
    from flyconfigs.schema.load import load_artifact
    from flyconfigs.schema.pack import is_pack_document, read_artifacts

    found: list[tuple[Artifact, Path]] = []
    for raw in raw_paths:
        path = Path(raw)
        if not path.exists():
            raise Usage(f"{raw}: no such file or directory")
        try:
            if path.is_dir():
                found.extend(sorted(read_artifacts(path)[0].values(), key=lambda pair: pair[0].file_name()))
            elif path.name.endswith(SUFFIX):
                continue
            elif is_pack_document(read_document(path)):
                rows = [pair for pair in read_artifacts(path.parent)[0].values() if pair[1] == path]
                found.extend(sorted(rows, key=lambda pair: pair[0].file_name()))
            else:
                found.append((load_artifact(path), path))
        except ArtifactError as exc:
            skipped.append({"file": str(path), "why": str(exc)})
    return found


def _export(args: argparse.Namespace) -> int:
    from flyconfigs.adapters.t4 import artifact_to_t4, validate_t4
    from flyconfigs.schema.jsonio import write_atomic

    done: list[dict[str, str]] = []
    skipped: list[dict[str, str]] = []
    for artifact, path in _measured_artifacts(args.paths, skipped):
        try:
            document = artifact_to_t4(artifact)
            validate_t4(document, str(path))
        except ArtifactError as exc:
            skipped.append({"file": str(path), "why": str(exc)})
            continue
        target = Path(args.out) / artifact.device.arch / (artifact.file_name().removesuffix(".json") + SUFFIX)
        write_atomic(target, (json.dumps(document, indent=1) + "\n").encode("utf-8"))
        done.append({"from": str(path), "to": str(target)})
    if args.json:
        emit_json({"command": "t4 export", "files": done, "skipped": skipped})
    else:
        for row in done:
            print(f"{row['from']} -> {row['to']}")
        for row in skipped:
            print(f"flyconfigs: skipped: {row['why']}", file=sys.stderr)
        print(f"{len(done)} T4 files written, {len(skipped)} skipped", file=sys.stderr)
    return 0 if done else 1


def _import(args: argparse.Namespace) -> int:
    from flyconfigs.adapters.importing import T4Identity, write_imports
    from flyconfigs.registry import find_product, kernel_declaration, parse_device_spec

    given = None
    if args.kernel is not None:
        if not args.key or args.device is None:
            raise Usage("--kernel needs the key items (AXIS=VALUE) and --device: a T4 file names neither")
        decl = kernel_declaration(args.kernel)
        key = decl.check_key(parse_key(args.key))
        product = find_product(args.device)
        if product is None:
            query = parse_device_spec(args.device, "--device")
            raise Usage(f"--device {args.device!r}: name a product of the catalog (got {query.describe()})")
        given = T4Identity({"name": decl.name, "version": decl.version}, key, product.device,
                           decl.default_config(key, None))
    report = write_imports("t4", existing_paths(args.paths), args.out, t4=given)
    return render_import(report, args.paths, args.json)


def register(sub: Any) -> None:
    """Add ``t4 export`` and ``t4 import``."""
    group = sub.add_parser("t4", help="Kernel Tuner's T4 results files: export measured artifacts, import T4 files")
    actions = group.add_subparsers(dest="t4_command", required=True, metavar="ACTION")
    p = add_command(actions, "export", _export, "measured artifacts (files or folders) as T4 results files in "
                    "OUT/<arch>/, each validated against T4's JSON Schema")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--out", required=True)
    p = add_command(actions, "import", _import, "T4 results files as artifacts in OUT/<arch>/ (a file Kernel Tuner "
                    "wrote needs --kernel, the key items and --device)")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--out", required=True)
    p.add_argument("--kernel", help="the kernel a Kernel Tuner file tuned")
    p.add_argument("--key", nargs="*", metavar="AXIS=VALUE", help="the problem it tuned, as the kernel's key")
    p.add_argument("--device", help="the GPU it ran on: a product of the catalog (H100, MI300X, …)")
