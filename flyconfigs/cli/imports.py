"""``flyconfigs import vllm|aiter|flydsl``: the config files other projects ship, as
``imported`` artifacts, through :func:`flyconfigs.adapters.importing.write_imports`.

``vllm`` and ``aiter`` write each artifact under ``OUT/<arch>/`` (one folder per publish
target, ready for ``flyconfigs publish OUT/<arch> --target <arch>``); ``flydsl`` writes into
``OUT`` as ``flyconfigs flydsl import`` always has (it stays as the older spelling).  An
entry that cannot be represented is reported with its file, entry and field; everything
else is imported, never over a measured or predicted artifact of the same kernel, device
and key, and the exit status is 1 if anything was refused.  This module parses the
arguments and renders the :class:`~flyconfigs.adapters.importing.ImportReport`
(:func:`~flyconfigs.cli._reports.render_import`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from flyconfigs.cli import aiter, flydsl
from flyconfigs.cli._common import Usage
from flyconfigs.cli._reports import existing_paths, render_import

if TYPE_CHECKING:
    from flyconfigs.schema.models import Device

__all__ = ["register"]

def _devices(specs: Sequence[str] | None) -> list[Device]:
    """``--device`` values as full device descriptors; :class:`Usage` for one that does
    not name an arch, a CU count and a product."""
    from flyconfigs.registry import parse_device_spec
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
    from flyconfigs.adapters.importing import write_imports

    report = write_imports("vllm", existing_paths(args.paths), args.out, revision=args.revision,
                           devices=_devices(args.device), artifacts=args.artifacts)
    return render_import(report, args.paths, args.json)


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
