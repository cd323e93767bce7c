"""The kernel, its launch with a config, its float64 reference, and the op users call."""

import torch
import triton
import triton.language as tl

from flyconfigs.kernels.triton_config import TritonConfigs

EPS = 1e-5
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
NAMES = {dtype: name for name, dtype in DTYPES.items()}


@triton.jit
def layer_norm_fwd(X, W, B, Y, Mean, Rstd, stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    diff = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride + cols, (diff * rstd * w + b).to(Y.dtype.element_ty), mask=mask)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)


def inputs(key, device):
    """One call's ``x`` (``M × N``), ``weight`` and ``bias`` (``N``), of the key's dtype."""
    dtype = DTYPES[key["dtype"]]
    x = torch.randn(key["M"], key["N"], device=device).to(dtype)
    return x, torch.randn(key["N"], device=device).to(dtype), torch.randn(key["N"], device=device).to(dtype)


def outputs(x, weight, bias):
    """What a launch fills: ``y`` like ``x``, and each row's mean and 1/std in fp32."""
    rows = x.shape[0]
    return (torch.empty_like(x), torch.empty(rows, device=x.device, dtype=torch.float32),
            torch.empty(rows, device=x.device, dtype=torch.float32))


def launch(config, x, weight, bias, y, mean, rstd):
    return layer_norm_fwd[(x.shape[0],)](x, weight, bias, y, mean, rstd, x.stride(0), x.shape[1], EPS,
                                         BLOCK_N=config["BLOCK_N"], num_warps=config["num_warps"])


def reference(x, weight, bias):
    x = x.double()
    mean = x.mean(dim=1)
    rstd = torch.rsqrt(x.var(dim=1, unbiased=False) + EPS)
    return (x - mean[:, None]) * rstd[:, None] * weight.double() + bias.double(), mean, rstd


CONFIGS = TritonConfigs("acme_layernorm")


def layer_norm(x, weight, bias):
    """LayerNorm of each row of ``x`` (``y``, and each row's mean and 1/std), launched with
    the registry's config for this shape and device (the default for a CPU tensor)."""
    y, mean, rstd = outputs(x, weight, bias)
    key = {"M": x.shape[0], "N": x.shape[1], "dtype": NAMES[x.dtype]}
    launch(dict(CONFIGS(key, x.device).config), x, weight, bias, y, mean, rstd)
    return y, mean, rstd
