"""How the default a tuning run measured compares with its tuned winner, key by key.

``flyconfigs tune`` times the kernel's default beside every candidate in one
interleaved measurement and records it in each artifact (``default``); this reads a
folder of artifacts from one such run and writes the ratios, so a default can be scored
on keys tuned after it was made (row lengths its table never saw).

    flyconfigs tune rmsnorm --key-grid "M=1,16,256,4096,65536 N=640,2304,4608,10240,14336 dtype=bf16" --out DIR
    python -m bench.default_vs_tuned DIR --name rmsnorm-default-unseen-n-h200

A folder that holds several kernels' or devices' artifacts (a data package's) is read
with ``--kernel`` and ``--product``; without them it is refused.  ``--key-grid G`` keeps
only the keys of those grids (a preset of the kernel, ``@FILE`` or ``AXIS=V1,V2 …``, as
``flyconfigs tune`` takes them) and ``--except-key-grid G`` leaves theirs out, so a figure
over a package's keys stays the same figure when the package gains keys:

    python -m bench.default_vs_tuned artifacts/sm90 --kernel rmsnorm --product "NVIDIA H100 80GB HBM3" --key-grid models --except-key-grid perf --except-key-grid hidden --name NAME
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from bench.common import write_result
from flyconfigs.kernels.measured import artifacts_of
from flyconfigs.registry import kernel_declaration
from flyconfigs.schema.canonical import canonical_text
from flyconfigs.tuner.grid import parse_grids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", type=Path, help="folder for the result (default bench/results)")
    parser.add_argument("--kernel", help="read only this kernel's artifacts")
    parser.add_argument("--product", help="read only the artifacts tuned on this product")
    parser.add_argument("--key-grid", action="append", default=[], help="keep only the keys of this grid (repeatable)")
    parser.add_argument("--except-key-grid", action="append", default=[], help="leave out the keys of this grid (repeatable)")
    args = parser.parse_args()
    if (args.key_grid or args.except_key_grid) and not args.kernel:
        parser.error("--key-grid and --except-key-grid need --kernel (the grids are the kernel's)")
    decl = kernel_declaration(args.kernel) if args.kernel else None
    kept = {canonical_text(k) for k in parse_grids(args.key_grid, decl)} if args.key_grid else None
    left_out = {canonical_text(k) for k in parse_grids(args.except_key_grid, decl)}
    keys, devices = [], []
    for path, artifact in artifacts_of(args.folder, args.kernel, args.product):
        text = canonical_text(dict(artifact.key))
        if (kept is not None and text not in kept) or text in left_out:
            continue
        devices.append(artifact.device)
        if not artifact.selection.measured or artifact.default is None or artifact.default.timing is None:
            raise SystemExit(f"{path}: not a measured artifact with a timed default")
        ratio = artifact.default.timing.median_us / artifact.winner.timing.median_us  # type: ignore[union-attr]
        keys.append({"key": dict(artifact.key), "default": dict(artifact.default.config),
                     "winner": dict(artifact.winner.config), "default_over_tuned": ratio})
    if not keys:
        raise SystemExit(f"{args.folder}: no artifact")
    ratios = [k["default_over_tuned"] for k in keys]
    device = devices[0]
    within = sum(r <= 1.10 for r in ratios)
    summary = {
        "keys": len(keys),
        "within_10_percent": within / len(ratios),
        "geomean_default_over_tuned": math.exp(sum(map(math.log, ratios)) / len(ratios)),
        "worst_default_over_tuned": max(ratios),
    }
    path = write_result(args.name, {"device": device.model_dump(mode="json"), "summary": summary, "per_key": keys,
                                    "key_grids": args.key_grid, "except_key_grids": args.except_key_grid}, args.out)
    print(f"{within} of {len(keys)} keys within 10% of tuned, geomean "
          f"{summary['geomean_default_over_tuned']:.3f}x, worst {summary['worst_default_over_tuned']:.2f}x -> {path}")


if __name__ == "__main__":
    main()
