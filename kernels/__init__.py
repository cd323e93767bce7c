"""flyconfigs.kernels: kernel families and the ops users call.

``flyconfigs.kernels.rms_norm`` is imported on first use, so importing this package
(as the registry does for a kernel's declaration) never imports torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["rms_norm"]


def __getattr__(name: str) -> Any:
    if name == "rms_norm":
        from flyconfigs.kernels.rmsnorm_op import rms_norm

        return rms_norm
    raise AttributeError(f"module 'flyconfigs.kernels' has no attribute {name!r}")
