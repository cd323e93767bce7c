"""The RMSNorm tunables a config may leave out and what a missing one means: shared by
the declaration, the learned default and the cost model, which read configs published
before those tunables existed.  Imports nothing of its family, so each of them can
import it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["NEUTRAL", "cluster_of", "hints_of"]

NEUTRAL: dict[str, Any] = {"cluster": 1, "cache_hints": "none"}
"""Tunables added after configs were published, and the value a config without them means."""


def cluster_of(config: Mapping[str, Any]) -> int:
    """The blocks ``config`` shares a row over (a config from before the tunable: 1)."""
    return int(config.get("cluster", NEUTRAL["cluster"]))


def hints_of(config: Mapping[str, Any]) -> str:
    """``config``'s cache hints (a config from before the tunable: ``none``)."""
    return str(config.get("cache_hints", NEUTRAL["cache_hints"]))
