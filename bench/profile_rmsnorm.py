"""Runs each contender once per shape inside an NVTX range named ``ncu``, after a warm-up
outside it, so that Nsight Compute profiles exactly those launches:

    ncu --nvtx --nvtx-include "ncu/" --section SpeedOfLight --section Occupancy ... \\
        python bench/profile_rmsnorm.py --shape 65536x16384:bf16 --shape 16x4096:bf16

Prints, in launch order, which contender each profiled kernel belongs to (the table
``ncu`` prints follows the same order).
"""

from __future__ import annotations

import argparse

import torch

from rmsnorm import _compiled_expression, _liger, contenders_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", action="append", required=True, help="MxN:dtype[:weight_dtype]")
    parser.add_argument("--contenders", default="flyconfigs,torch.compile,liger")
    args = parser.parse_args()
    wanted = set(args.contenders.split(","))
    compiled = _compiled_expression() if "torch.compile" in wanted else None
    liger = _liger() if "liger" in wanted else None
    for text in args.shape:
        size, dtype, *rest = text.split(":")
        m, n = (int(v) for v in size.split("x"))
        runs, info = contenders_for(m, n, dtype, rest[0] if rest else dtype, 2, wanted, compiled, liger)
        for name, run in runs.items():
            for _ in range(3):
                run(1)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("ncu")
            run(0)
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            print(f"profiled {name} {m}x{n} {dtype}" + (f" {info['served_config']}" if name == "flyconfigs" else ""),
                  flush=True)


if __name__ == "__main__":
    main()
