"""flyconfigs.kernels: kernel families and the ops users call.

``flyconfigs.kernels.rms_norm`` and ``flyconfigs.kernels.fused_add_rms_norm`` are
imported on first use, so importing this package (as the registry does for a kernel's
declaration) never imports torch or Triton.
"""

from __future__ import annotations

from typing import Any

__all__ = ["fused_add_rms_norm", "rms_norm"]


def __getattr__(name: str) -> Any:
    if name == "rms_norm":
        from flyconfigs.kernels.rmsnorm.op import rms_norm

        return rms_norm
    if name == "fused_add_rms_norm":
        from flyconfigs.kernels.fused_add_rmsnorm.op import fused_add_rms_norm

        return fused_add_rms_norm
    raise AttributeError(f"module 'flyconfigs.kernels' has no attribute {name!r}")
