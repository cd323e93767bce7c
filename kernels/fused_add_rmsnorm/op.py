"""``fused_add_rms_norm(x, residual, weight, eps=1e-6, out=None)``: the op users call
(the tuner's workload, :mod:`.workload`, is exported here too).

``residual += x`` in place, then ``out = rms_norm(residual, weight, eps)``.  Each call
resolves its config through the registry (so an installed data package changes what
runs) and launches the implementation it names on the current stream: the Triton
kernel, or the RMSNorm source's fused kernel (compiled through the GPU layer, cached on
disk).  A ``source`` config whose vector accesses the tensors' addresses or row strides
do not allow runs the family's default (a Triton config) for that call instead.  It is the torch
custom op ``flyconfigs::fused_add_rms_norm`` (mutating ``residual`` and ``out``) with a
fake implementation, so it works under ``torch.compile``, and inside CUDA/HIP graph
capture after one eager call at that shape has compiled the variant.
"""

from __future__ import annotations

from typing import Any

import torch

from flyconfigs.kernels.fused_add_rmsnorm.declaration import SPEC
from flyconfigs.kernels.fused_add_rmsnorm.workload import FusedAddRMSNormWorkload, aligned, launch
from flyconfigs.kernels.torch_dtypes import NAME_OF
from flyconfigs.kernels.triton_config import device_query
from flyconfigs.registry import resolve

__all__ = ["FusedAddRMSNormWorkload", "fused_add_rms_norm", "launch"]


def _check(x: Any, residual: Any, weight: Any, out: Any, eps: Any) -> None:
    """Every input rule, before anything touches a device."""
    for name, value in (("x", x), ("residual", residual), ("weight", weight)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"fused_add_rms_norm: {name} must be a torch tensor, got {type(value).__name__}")
    if x.dtype not in NAME_OF:
        raise TypeError(f"fused_add_rms_norm supports bfloat16, float16 and float32 activations, not {x.dtype}")
    if residual.dtype != x.dtype:
        raise TypeError(f"residual must be {x.dtype} like x, got {residual.dtype}")
    if weight.dtype not in (x.dtype, torch.float32):
        raise TypeError(f"weight must be {x.dtype} or float32, got {weight.dtype}")
    if x.dim() < 1 or x.numel() == 0:
        raise ValueError(f"fused_add_rms_norm needs a non-empty tensor with a last dimension, got shape {tuple(x.shape)}")
    if residual.shape != x.shape:
        raise ValueError(f"residual must have the shape of x {tuple(x.shape)}, got {tuple(residual.shape)}")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1] or weight.stride(0) != 1:
        raise ValueError(f"weight must be contiguous with shape ({x.shape[-1]},), got {tuple(weight.shape)}")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch tensor, got {type(out).__name__}")
        if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
            raise ValueError(f"out must match x (shape {tuple(x.shape)}, {x.dtype}, {x.device}); "
                             f"got {tuple(out.shape)}, {out.dtype}, {out.device}")
        if out.data_ptr() in (x.data_ptr(), residual.data_ptr()):
            raise ValueError("out must not be x or residual: the op reads both while it writes out")
    if x.device.type != "cuda":
        raise ValueError(f"fused_add_rms_norm runs on a GPU; x is on {x.device}")
    if residual.device != x.device or weight.device != x.device:
        raise ValueError(f"x, residual and weight must be on one device; got {x.device}, {residual.device}, {weight.device}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")


def _rows(t: torch.Tensor) -> torch.Tensor | None:
    """``t`` as 2-D rows without a copy, or ``None`` when its rows are not evenly strided
    or its columns not contiguous."""
    n = t.shape[-1]
    if t.stride(-1) != 1:
        return None
    if t.dim() == 2:
        return t
    try:
        return t.view(-1, n)
    except RuntimeError:
        return None


def _run(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    x2 = _rows(x)
    if x2 is None:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
    r2, y2 = _rows(residual), _rows(out)
    r_staged, y_staged = r2 is None, y2 is None
    if r2 is None:
        r2 = residual.reshape(-1, x.shape[-1]).contiguous()
    if y2 is None:
        y2 = torch.empty(x2.shape, dtype=out.dtype, device=out.device)
    key = {"M": x2.shape[0], "N": x2.shape[1], "dtype": NAME_OF[x.dtype], "weight_dtype": NAME_OF[weight.dtype]}
    device = device_query(x.device)
    config = resolve(SPEC, key, device).config
    if not aligned(config, x2, r2, y2, weight=weight):
        config = SPEC.default_config(SPEC.check_key(key), device)
    launch(x2, r2, weight, y2, eps, config)
    if r_staged:
        residual.copy_(r2.view(residual.shape))
    if y_staged:
        out.copy_(y2.view(out.shape))


@torch.library.custom_op("flyconfigs::fused_add_rms_norm", mutates_args=("residual", "out"))
def _fused_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    _run(x, residual, weight, eps, out)


@_fused_op.register_fake
def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    return None


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                       out: torch.Tensor | None = None) -> torch.Tensor:
    """``residual += x`` (in place), then ``rms_norm(residual, weight, eps)``, returned in
    ``out`` (allocated when ``None``).

    ``x`` and ``residual``: bfloat16, float16 or float32, one shape, on a CUDA/HIP device;
    ``weight``: shape ``(N,)``, the activation dtype or float32.  The sum is rounded to
    the residual's dtype before it is normalized, as the unfused pair does.  Raises
    ``TypeError`` or ``ValueError`` for bad input before anything is launched."""
    _check(x, residual, weight, out, eps)
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if torch.compiler.is_compiling():
        _fused_op(x, residual, weight, float(eps), out)
    else:
        # Eager calls (graph capture included) skip the dispatcher's host cost.
        _run(x, residual, weight, float(eps), out)
    return out
