"""Runs each contender once per shape inside an NVTX range named ``ncu``, after a warm-up
outside it, so that Nsight Compute profiles exactly those launches:

    ncu --nvtx --nvtx-include "ncu/" --section SpeedOfLight --section Occupancy ... \\
        python bench/profile_rmsnorm.py --shape 65536x16384:bf16 --shape 16x4096:bf16

``--config '{"threads": 128, ...}'`` (repeatable) profiles that config of the op beside the
served one on every shape where the spec accepts it for the key and this device; the others
are named and skipped.  Such a launch writes into a NaN-filled output, so torch's fill
kernel is profiled just before it.

Prints, in launch order, which contender each profiled kernel belongs to (the table
``ncu`` prints follows the same order).
"""

from __future__ import annotations

import argparse
import json

import torch
from rmsnorm import EPS, _compiled_expression, _liger, contenders_for

from flyconfigs.gpu import get_backend
from flyconfigs.kernels.rmsnorm import SPEC, reference_rms_norm
from flyconfigs.kernels.rmsnorm.op import kernel_for
from flyconfigs.kernels.torch_dtypes import TORCH_DTYPES
from flyconfigs.registry import DeviceQuery


def _forced(config: dict, m: int, n: int, dtype: str, wdtype: str):
    """A checked call of the op's kernel with ``config`` on fresh inputs, or ``None``
    (printed) where the spec refuses ``config`` for this key and device."""
    x = torch.randn(m, n, device="cuda").mul_(2).to(TORCH_DTYPES[dtype])
    w = (torch.rand(n, device="cuda") + 0.5).to(TORCH_DTYPES[wdtype])
    backend = get_backend()
    key = SPEC.check_key({"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype})
    why = SPEC.check_config(config, key, DeviceQuery.of(backend.device().identity))
    if why is not None:
        print(f"skipped config {config} for {m}x{n}: {why}", flush=True)
        return None
    kernel = kernel_for(backend, config, key)
    grid, block, shared = SPEC.grid(config, m)

    def call(_: int) -> torch.Tensor:
        y = torch.full_like(x, float("nan"))
        kernel.launch(grid, block, (x, w, y, m, n, n, EPS), torch.cuda.current_stream().cuda_stream, shared)
        return y

    y = call(0)
    ref = reference_rms_norm(x, w, EPS)
    err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    if not err < 2e-2:
        raise SystemExit(f"config {config} is wrong on {m}x{n}: max relative error {err}")
    return call


def _profile(name: str, run, text: str) -> None:
    for _ in range(3):
        run(1)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("ncu")
    run(0)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"profiled {name} {text}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", action="append", required=True, help="MxN:dtype[:weight_dtype]")
    parser.add_argument("--contenders", default="flyconfigs,torch.compile,liger")
    parser.add_argument("--config", action="append", default=[], type=json.loads,
                        help="a config of the op (JSON) to profile beside the served one")
    args = parser.parse_args()
    wanted = set(args.contenders.split(","))
    compiled = _compiled_expression() if "torch.compile" in wanted else None
    liger = _liger() if "liger" in wanted else None
    for text in args.shape:
        size, dtype, *rest = text.split(":")
        m, n = (int(v) for v in size.split("x"))
        wdtype = rest[0] if rest else dtype
        runs, info = contenders_for(m, n, dtype, wdtype, 2, wanted, compiled, liger)
        for name, run in runs.items():
            _profile(name, run, f"{m}x{n} {dtype}" + (f" {info['served_config']}" if name == "flyconfigs" else ""))
        for config in args.config:
            call = _forced(config, m, n, dtype, wdtype)
            if call is not None:
                _profile("flyconfigs-config", call, f"{m}x{n} {dtype} {config}")


if __name__ == "__main__":
    main()
