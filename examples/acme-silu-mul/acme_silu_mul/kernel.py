"""The kernel, its launch with a config, its float64 reference, and the op users call."""

import torch
import triton
import triton.language as tl

from flyconfigs.kernels.triton_config import TritonConfigs

SCALE = 0.5
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@triton.jit
def silu_mul_kernel(G, U, Y, N, stride, scale, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * stride
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        g = tl.load(G + row + cols, mask=cols < N, other=0.0).to(tl.float32)
        u = tl.load(U + row + cols, mask=cols < N, other=0.0).to(tl.float32)
        y = g * tl.sigmoid(g) * u * scale
        tl.store(Y + row + cols, y.to(Y.dtype.element_ty), mask=cols < N)


def inputs(key, device):
    """One call's gate and up, ``M × N`` of the key's dtype."""
    return tuple(torch.randn(key["M"], key["N"], device=device).to(_DTYPES[key["dtype"]]) for _ in range(2))


def launch(config, gate, up, out):
    return silu_mul_kernel[(gate.shape[0],)](gate, up, out, gate.shape[1], gate.stride(0), SCALE,
                                             BLOCK_N=config["BLOCK_N"], num_warps=config["num_warps"])


def reference(gate, up):
    g = gate.double()
    return g * torch.sigmoid(g) * up.double() * SCALE


CONFIGS = TritonConfigs("acme_silu_mul")
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}


def silu_mul(gate, up):
    """``silu(gate) * up * 0.5`` with the registry's config for this shape and device."""
    out = torch.empty_like(gate)
    key = {"M": gate.shape[0], "N": gate.shape[1], "dtype": _NAMES[gate.dtype]}
    launch(dict(CONFIGS(key, gate.device).config), gate, up, out)
    return out
