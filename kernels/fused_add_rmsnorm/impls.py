"""Which implementation a fused add + RMSNorm config runs, read from the config alone:
shared by the declaration and the workload (which may not import the declaration).
Imports nothing of torch or Triton."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["IMPLS", "impl_of", "source_config"]

IMPLS = ("triton", "source")


def impl_of(config: Mapping[str, object]) -> str:
    """The implementation ``config`` runs: its ``impl``, ``triton`` where it leaves it out."""
    return str(config.get("impl", "triton"))


def source_config(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """A ``source`` config as the RMSNorm source's config (``impl`` left out); ``None``
    for a Triton one."""
    if impl_of(config) != "source":
        return None
    return {k: v for k, v in config.items() if k != "impl"}
