"""``flyconfigs import vllm|aiter|flydsl``: the config files other projects ship, as
``imported`` artifacts.

``vllm`` and ``aiter`` write each artifact under ``OUT/<arch>/`` (one folder per publish
target, ready for ``flyconfigs publish OUT/<arch> --target <arch>``); ``flydsl`` writes into
``OUT`` as ``flyconfigs flydsl import`` always has (it stays as the older spelling).  An
entry that cannot be represented is reported with its file, entry and field; everything
else is imported, never over a measured or predicted artifact of the same kernel, device
and key, and the exit status is 1 if anything was refused.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flyconfigs.cli import aiter, flydsl
from flyconfigs.cli._common import Usage, emit_json, iter_json_files
from flyconfigs.errors import ArtifactError

__all__ = ["register"]


def _run(args: argparse.Namespace, command: str, files: list[Path], one: Callable[[Path], Any], wanted: str) -> int:
    from flyconfigs.adapters.imported import write_imported, write_imported_table

    if not files:
        # Folders named that hold nothing to import are a problem found (exit 1), said as one.
        print(f"flyconfigs: error: no {wanted} in {', '.join(args.paths)}", file=sys.stderr)
    out = Path(args.out)
    done: list[dict[str, str]] = []
    refused: list[dict[str, str]] = []
    written: dict[Path, tuple[bytes, str]] = {}
    for path in files:
        try:
            result = one(path)
        except ArtifactError as exc:
            refused.extend({"file": str(path), "field": p.field, "message": p.message} for p in exc.problems)
            continue
        for error in result.refused:
            refused.extend({"file": str(path), "field": p.field, "message": p.message} for p in error.problems)
        for artifact in result.artifacts:
            entry = artifact.provenance.source.entry if artifact.provenance.source else ""
            target = out / artifact.device.arch / artifact.file_name()
            data = artifact.to_json_bytes()
            if target in written and written[target][0] != data:
                refused.append({"file": str(path), "field": entry or "", "message": f"the same kernel, device and key "
                                f"as {written[target][1]}, with another config; not written"})
                continue
            try:
                # An import never replaces a measured or predicted artifact of the same slot.
                to = write_imported(artifact, target.parent)
            except ArtifactError as exc:
                refused.extend({"file": str(path), "field": entry or "", "message": str(p)} for p in exc.problems)
                continue
            written[target] = (data, f"{path}: {entry}")
            done.append({"from": str(path), "entry": entry or "", "to": str(to)})
        for table in result.tables:
            target = out / table.device.arch / table.file_name()
            data = table.to_json_bytes()
            if target in written and written[target][0] != data:
                refused.append({"file": str(path), "field": "", "message": f"the same table as {written[target][1]}, "
                                f"with other rows; not written"})
                continue
            written[target] = (data, str(path))
            table_to, shadowing = write_imported_table(table, target.parent, str(path))
            for error in shadowing:
                refused.extend({"file": str(path), "field": p.field, "message": p.message} for p in error.problems)
            if table_to is not None:
                rows = len(table.rows) - len(shadowing)
                done.append({"from": str(path), "entry": f"table of {rows} row{'' if rows == 1 else 's'}",
                             "to": str(table_to)})
    if args.json:
        emit_json({"command": command, "files": done, "refused": refused})
    else:
        for row in done:
            print(f"{row['from']} {row['entry']} -> {row['to']}")
        for bad in refused:
            print(f"flyconfigs: refused: {bad['file']}: {bad['field'] or '<document>'}: {bad['message']}", file=sys.stderr)
        print(f"{len(done)} imported, {len(refused)} refused", file=sys.stderr)
    return 1 if refused or not files else 0


def _devices(specs: Sequence[str] | None) -> list[Any]:
    """``--device`` values as full device descriptors; :class:`Usage` for one that does
    not name an arch, a CU count and a product."""
    from flyconfigs.registry.sources.device import parse_device_spec
    from flyconfigs.schema.models import Device, wave_size_of_arch

    out = []
    for spec in specs or []:
        query = parse_device_spec(spec, "--device")
        if query.product is None or query.compute_units is None:
            raise Usage(f"--device {spec!r}: name the arch, the CU count and the product (ARCH:CUS:PRODUCT[:FEATURES])")
        out.append(Device.model_validate({
            "vendor": query.vendor, "arch": query.arch, "product": query.product, "compute_units": query.compute_units,
            "features": list(query.features or ()), "wave_size": wave_size_of_arch(query.arch)}))
    return out


def upstream_paths(args: argparse.Namespace, opener: Callable[[Path], Any]) -> list[Any]:
    """Replace each of ``args.paths`` that is an upstream release (a wheel, an installed
    package, a checkout: :func:`flyconfigs.adapters.upstream.is_upstream`) by its config
    folder, and set ``args.revision`` from the release unless given; the trees opened, to close."""
    from flyconfigs.adapters.upstream import is_upstream

    trees = []
    for index, raw in enumerate(args.paths):
        if is_upstream(Path(raw)):
            tree = opener(Path(raw))
            trees.append(tree)
            args.paths[index] = str(tree.folder)
            if args.revision is None:
                args.revision = tree.revision
            print(f"{raw}: revision {tree.revision or 'unknown'}, read from {tree.how}", file=sys.stderr)
    return trees


def _vllm(args: argparse.Namespace) -> int:
    from flyconfigs.adapters.upstream import vllm_tree
    from flyconfigs.adapters.vllm import import_vllm_file, tabulated

    devices = _devices(args.device)

    def one(path: Path) -> Any:
        imported = import_vllm_file(path, args.revision, devices)
        return imported if args.artifacts else tabulated(imported)

    trees = upstream_paths(args, vllm_tree)
    try:
        return _run(args, "import vllm", iter_json_files(args.paths), one, "vLLM config file (*.json)")
    finally:
        for tree in trees:
            tree.close()


def register(sub: Any) -> None:
    """Add ``import vllm``, ``import aiter`` and ``import flydsl``."""
    group = sub.add_parser("import", help="import the config files other projects ship as artifacts")
    actions = group.add_subparsers(dest="import_command", required=True, metavar="FORMAT")
    for name, handler, text in (
        ("vllm", _vllm, "vLLM fused-MoE config files (E=…,N=…,device_name=….json) -> OUT/<arch>/, one table each"),
        ("aiter", aiter.import_files, "aiter tuned CSVs (aiter/configs, model_configs, FlyDSL ops) -> tables in "
                                      "OUT/<arch>/"),
    ):
        p = actions.add_parser(name, help=text, description=text)
        p.add_argument("paths", nargs="+", metavar="PATH",
                       help="files, folders to search, or an upstream release: a wheel, an installed package or a "
                            "checkout (its version or commit is recorded)")
        p.add_argument("--out", required=True, help="folder for the artifacts, one subfolder per arch")
        p.add_argument("--revision", help="the upstream commit or tag the files were taken from (recorded)")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "vllm":
            p.add_argument("--artifacts", action="store_true",
                           help="one artifact per batch size instead of one table per file (schema 1.6)")
            p.add_argument("--device", action="append", metavar="SPEC",
                           help="a GPU the product catalog does not know, as ARCH:CUS:PRODUCT[:FEATURES]; files whose "
                                "device_name is PRODUCT with spaces as underscores take it (repeatable)")
        if name == "aiter":
            p.add_argument("--upstream-dir", help="the files' folder in aiter (default: aiter/configs, or aiter/ops/flydsl "
                                                  "for the FlyDSL ops' files; a subfolder found is kept)")
        p.set_defaults(handler=handler)
    p = actions.add_parser("flydsl", help="FlyDSL offline autotune files -> flyconfigs artifacts in OUT",
                           description="FlyDSL offline autotune files -> flyconfigs artifacts in OUT (as `flyconfigs "
                                       "flydsl import`)")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--out", required=True, help="folder for the artifacts")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    flydsl.add_import_options(p)
    p.set_defaults(handler=flydsl.import_files)
