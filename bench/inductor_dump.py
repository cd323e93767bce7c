"""The code Inductor generates for the fused add + RMSNorm peer (``r.add_(x)`` then
``F.rms_norm``, compiled with ``dynamic=False``, as ``bench.fused_add_rmsnorm`` compiles
it) at given shapes: run it with ``TORCH_LOGS=output_code`` and the log holds the Triton
kernels and their launch (block sizes, warps, hints).  With ``max-autotune``-free
defaults, Inductor may autotune a persistent against a looped reduction at the first call;
``TORCH_LOGS=output_code,autotuning`` also says which it chose.

    TORCH_LOGS=output_code python -m bench.inductor_dump 96x4352 256x4096 2> FILE
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

EPS = 1e-6


def main() -> None:
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 1024

    def composite(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        r.add_(x)
        return F.rms_norm(r, (r.shape[-1],), w, EPS)

    compiled = torch.compile(composite, dynamic=False)
    for shape in sys.argv[1:]:
        m, n = (int(v) for v in shape.split("x"))
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.rand(n, device="cuda", dtype=torch.bfloat16)
        print(f"=== {m}x{n} bf16 ===", file=sys.stderr, flush=True)
        compiled(x, r, w)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
