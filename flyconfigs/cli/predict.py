"""``flyconfigs predict``: predicted artifacts for a GPU that is not here (the path is
:mod:`flyconfigs.tuner.predict`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flyconfigs.cli._common import Usage, add_command, add_grid_arguments, emit_json, grid_extra, key_grids

__all__ = ["register"]


def _predict(args: argparse.Namespace) -> int:
    from flyconfigs.gpu import backend_for_vendor
    from flyconfigs.kernels.plugin import tunable_kernel
    from flyconfigs.registry import find_product, product_catalog
    from flyconfigs.tuner.grid import parse_grids
    from flyconfigs.tuner.predict import predict
    from flyconfigs.tuner.toolchain import GPUToolchain
    from flyconfigs.tuner.worker import available_cpus

    product = find_product(args.device)
    if product is None:
        names = ", ".join(p.device.product for p in product_catalog().products)
        raise Usage(f"--device {args.device!r} is not a product of the catalog ({names})")
    device = product.device
    if args.target is not None and args.target != device.arch:
        raise Usage(f"--target {args.target} but {device.product} is {device.arch}")
    kernel = tunable_kernel(args.kernel)
    keys = parse_grids(key_grids(args), kernel, grid_extra(args))
    model = _refitted(kernel, device, args.refit) if args.refit else None
    toolchain = GPUToolchain(backend_for_vendor(device.vendor), available_cpus())

    def on(event: str, data: dict[str, Any]) -> None:
        if not args.json:
            key = " ".join(f"{k}={v}" for k, v in data["key"].items())
            print(f"{key}: {data['candidates']} candidates, predicted {data['predicted_us']:.2f} us "
                  f"(default {data['default_us']:.2f} us)", file=sys.stderr, flush=True)

    try:
        report = predict(kernel, keys, device, Path(args.out), toolchain, args.budget, args.resume, on,
                         model=model, shortlist=args.shortlist)
    finally:
        toolchain.close()
    summary = {"device": device.identity.model_dump(mode="json"), "keys": len(keys),
               "model": {"name": report.model[0], "version": report.model[1]} if report.model else None,
               "predicted": len(report.artifacts), "skipped": report.skipped, "statuses": report.statuses,
               "compiled": toolchain.compiled, "compile_cache_hits": toolchain.cached,
               "artifacts": [str(p) for p in report.artifacts]}
    if args.json:
        emit_json({"command": "predict", **summary})
    else:
        print(f"predicted {len(report.artifacts)} keys ({report.skipped} skipped) for {device.product} into {args.out}")
    return 0


def _refitted(kernel: Any, device: Any, folder: str) -> Any:
    """The kernel's cost model refitted on ``folder``'s measured tunings of ``device``'s product."""
    from flyconfigs.kernels.measured import artifacts_of
    from flyconfigs.kernels.plugin import cost_model

    model = cost_model(kernel)
    refit = getattr(model, "refit", None)
    if refit is None:
        raise Usage(f"--refit: the cost model {model.name} of {kernel.name} cannot be refitted")
    found = [(p, a) for p, a in artifacts_of(folder, kernel.name, device.product) if a.selection.measured]
    if not found:
        raise Usage(f"--refit {folder}: no measured {kernel.name} tuning of {device.product}")
    return refit([a for _, a in found], [p.name for p, _ in found])


def register(sub: Any) -> None:
    """Add ``predict``."""
    p = add_command(sub, "predict", _predict,
                    "compile every variant for a GPU that is not here, rank them with the kernel's cost model, "
                    "emit predicted artifacts")
    p.add_argument("kernel")
    p.add_argument("--device", required=True, help="a product of the catalog: MI300X, 'AMD Instinct MI325X', …")
    p.add_argument("--target", help="the arch the product must have (a check), e.g. gfx942")
    add_grid_arguments(p)
    p.add_argument("--out", default="predicted", help="folder for the artifacts (default: predicted)")
    p.add_argument("--budget", type=int, help="at most this many candidates per key (the default is always one)")
    p.add_argument("--resume", action="store_true", help="skip keys already predicted with the same source and toolchain")
    p.add_argument("--shortlist", type=int, metavar="K",
                   help="compile only the default and the K configs the model ranks best before compiling")
    p.add_argument("--refit", metavar="FOLDER",
                   help="refit the cost model on FOLDER's measured tunings of this product first (they outweigh "
                        "the reference's near their keys)")
