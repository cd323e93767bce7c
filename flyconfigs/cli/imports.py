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

from flyconfigs.cli import flydsl
from flyconfigs.cli._common import Usage, emit_json, iter_json_files
from flyconfigs.errors import ArtifactError

__all__ = ["register"]


def _csv_files(paths: Sequence[str], wanted: Callable[[str], bool]) -> dict[Path, str]:
    """The files named, and the ``*.csv`` files under the folders named whose name is
    ``wanted`` (sorted), each with its folder relative to the folder named (``""`` for a
    file named): a folder such as ``aiter/configs`` also holds untuned shapes and families
    that are not declared, which are not refused but left out."""
    files: dict[Path, str] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for found in sorted(p for p in path.rglob("*.csv") if p.is_file() and wanted(p.name)):
                folder = found.parent.relative_to(path).as_posix()
                files[found] = "" if folder == "." else folder
        elif path.exists():
            files[path] = ""
        else:
            raise Usage(f"{raw}: no such file or directory")
    return files


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
    from flyconfigs.registry.device import parse_device_spec
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


def _vllm(args: argparse.Namespace) -> int:
    from flyconfigs.adapters.vllm import import_vllm_file, tabulated

    devices = _devices(args.device)

    def one(path: Path) -> Any:
        imported = import_vllm_file(path, args.revision, devices)
        return imported if args.artifacts else tabulated(imported)

    return _run(args, "import vllm", iter_json_files(args.paths), one, "vLLM config file (*.json)")


def _aiter(args: argparse.Namespace) -> int:
    from flyconfigs.adapters.aiter import CONFIG_DIR, family_of, import_aiter_file
    from flyconfigs.kernels.aiter_gemm import FAMILIES

    def declared(name: str) -> bool:
        try:
            family_of(name)
        except ArtifactError:
            return False
        return True

    where = (args.upstream_dir or CONFIG_DIR).rstrip("/")
    files = _csv_files(args.paths, declared)
    # A file found in a subfolder of a folder named (aiter/configs/model_configs under
    # aiter/configs) has that subfolder upstream too.
    return _run(args, "import aiter", list(files), lambda p: import_aiter_file(
        p, args.revision, upstream_dir="/".join(part for part in (where, files[p]) if part)),
        "CSV of a declared family (" + ", ".join(f"*{f}_tuned_gemm*.csv" for f in FAMILIES) + ")")


def register(sub: Any) -> None:
    """Add ``import vllm``, ``import aiter`` and ``import flydsl``."""
    group = sub.add_parser("import", help="import the config files other projects ship as artifacts")
    actions = group.add_subparsers(dest="import_command", required=True, metavar="FORMAT")
    for name, handler, text in (
        ("vllm", _vllm, "vLLM fused-MoE config files (E=…,N=…,device_name=….json) -> OUT/<arch>/, one table each"),
        ("aiter", _aiter, "aiter tuned GEMM CSVs (<family>_tuned_gemm.csv) -> OUT/<arch>/"),
    ):
        p = actions.add_parser(name, help=text, description=text)
        p.add_argument("paths", nargs="+", metavar="PATH", help="files, or folders to search")
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
            p.add_argument("--upstream-dir", help="the files' folder in aiter (default aiter/configs; model configs "
                                                  "are in aiter/configs/model_configs)")
        p.set_defaults(handler=handler)
    p = actions.add_parser("flydsl", help="FlyDSL offline autotune files -> flyconfigs artifacts in OUT",
                           description="FlyDSL offline autotune files -> flyconfigs artifacts in OUT (as `flyconfigs "
                                       "flydsl import`)")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--out", required=True, help="folder for the artifacts")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=flydsl.import_files)
