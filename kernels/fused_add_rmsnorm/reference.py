"""What fused add + RMSNorm computes, as the reference the tuner checks against.
Imports nothing (it works on the torch tensors it is given)."""

from __future__ import annotations

from typing import Any

__all__ = ["reference_fused_add_rms_norm"]


def reference_fused_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float) -> tuple[Any, Any]:
    """The reference on torch tensors: the residual after the add (rounded to its dtype,
    as a torch add stores it) and the float64 RMSNorm of it."""
    summed = (x + residual).to(residual.dtype)
    rd = summed.double()
    rms = (rd.pow(2).mean(dim=-1, keepdim=True) + eps).rsqrt()
    return summed, rd * rms * weight.double()
