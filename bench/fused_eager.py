"""Eager fused add + RMSNorm per call (a Python loop, no graph), host included, every
contender in one process and interleaved: the op as served (``fused_add_rms_norm(x, r,
w)``, whatever config the registry serves, recorded), the family's default Triton config
launched through the JIT each call (what a Triton config cost before its prepared launch),
the same compiled kernel through its prepared launch (Triton's launcher, as the op's
eager path now does), and torch's eager composite (``r.add_(x)``, then ``F.rms_norm``).
Every contender allocates its output.  The summary says per shape whether the op as served
is no slower than torch's composite.

    python -m bench.fused_eager --out FILE [--shapes 8x4096,1x2880]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.common import machine
from bench.launch_overhead import per_call_us
from flyconfigs.gpu import get_backend
from flyconfigs.kernels import fused_add_rms_norm
from flyconfigs.kernels.fused_add_rmsnorm import SPEC
from flyconfigs.kernels.fused_add_rmsnorm.workload import launch, prepare_triton
from flyconfigs.kernels.rmsnorm.op import current_stream
from flyconfigs.registry import DeviceQuery, resolve

SHAPES = ((8, 4096), (1, 2880), (1, 4096), (16, 8192), (4096, 8192))
"""The eager shapes of the fused goals: two that were served a Triton config (8×4096, 1×2880) and three kept."""
EPS = 1e-6


def shape_row(m: int, n: int) -> dict[str, Any]:
    """Per-call µs of every contender at ``m`` × ``n`` bf16, and what was served."""
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 0.01
    r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(n, device="cuda", dtype=torch.bfloat16) + 0.5
    key = {"M": m, "N": n, "dtype": "bf16", "weight_dtype": "bf16"}
    device = DeviceQuery.of(get_backend().device().identity)
    served = resolve(SPEC, key, device)
    default = SPEC.default_config(key, device)
    y0 = torch.empty_like(x)
    compiled = launch(x, r, w, y0, EPS, default)
    prepared = prepare_triton(compiled, default, n, (x.data_ptr(), r.data_ptr(), w.data_ptr(), y0.data_ptr()),
                              torch.cuda.current_device())
    index = x.get_device()

    def jit() -> torch.Tensor:
        y = torch.empty_like(x)
        launch(x, r, w, y, EPS, default)
        return y

    def direct() -> torch.Tensor:
        y = torch.empty_like(x)
        assert prepared is not None
        prepared((x.data_ptr(), r.data_ptr(), w.data_ptr(), y.data_ptr(), m, n, n, n, EPS), current_stream(index))
        return y

    def composite() -> torch.Tensor:
        r.add_(x)
        return F.rms_norm(r, (n,), w, EPS)

    fns = {"fused_add_rms_norm_served": lambda: fused_add_rms_norm(x, r, w, EPS),
           "triton_default_jit": jit, "torch_add_then_F.rms_norm": composite}
    if prepared is not None:
        fns["triton_default_prepared"] = direct
    results = per_call_us(fns)
    ratio = results["fused_add_rms_norm_served"]["median"] / results["torch_add_then_F.rms_norm"]["median"]
    return {"M": m, "N": n, "served_config": dict(served.config), "served_from": served.source,
            "served_key_match": served.key_match, "default_config": default, "results": results,
            "served_vs_torch": ratio, "no_slower_than_torch": ratio <= 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", help="MxN,MxN… (default: the goals' five)")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else list(SHAPES)
    rows = []
    for m, n in shapes:
        row = shape_row(m, n)
        rows.append(row)
        line = "  ".join(f"{k} {v['median']:.2f}us" for k, v in row["results"].items())
        print(f"{m}x{n} (served {row['served_config'].get('impl', 'triton')} from {row['served_from']}): {line}",
              flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"benchmark": "fused_eager", "machine": machine(), "torch": torch.__version__,
                               "device": get_backend().device().model_dump(mode="json"), "rows": rows},
                              indent=1, sort_keys=True) + "\n")
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
