"""Which implementation a fused add + RMSNorm config runs, read from the config alone:
shared by the declaration and the workload (which may not import the declaration).
Imports nothing of torch or Triton."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["IMPLS", "impl_of", "pow2_at_least", "source_config", "tail_of"]

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


def pow2_at_least(n: int) -> int:
    """The smallest power of two that is at least ``n`` (1 for ``n <= 1``)."""
    return 1 << max(0, n - 1).bit_length()


def tail_of(config: Mapping[str, Any], n: int) -> int:
    """Columns of the tail tile a Triton ``config`` with ``row_tiles`` 2 keeps beside its
    head of ``block_n`` columns for a row of ``n`` (the power of two that holds the rest
    of the row, at least 32); 0 for one tile (what a config that leaves ``row_tiles``
    out means) or where the head already holds the row."""
    if int(config.get("row_tiles", 1)) != 2:
        return 0
    rest = n - int(config["block_n"])
    return max(32, pow2_at_least(rest)) if rest > 0 else 0
