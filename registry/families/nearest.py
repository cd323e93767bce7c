"""The default nearest-key rule: how far a tuned key is from the asked one when a family
gives no ``key_distance`` of its own (:func:`log_distance`, which
:meth:`KernelDecl.key_distance <flyconfigs.registry.families.contract.KernelDecl.key_distance>`
answers by default and the search precomputes for speed).

A family's own rule (``key_distance``, ``tie_rank``, ``pass_over_neighbour``) is called
checked through its :class:`~flyconfigs.registry.families.family.Family`; how the answers order
the candidates is :func:`~flyconfigs.registry.search.preference.rank_key`'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = ["log_distance"]


class _Axis(Protocol):
    """What the default rule reads of a key axis (:class:`~flyconfigs.registry.families.contract.KeyAxis`)."""

    @property
    def name(self) -> str: ...

    @property
    def ordinal(self) -> bool: ...


def log_distance(axes: Sequence[_Axis], asked: Mapping[str, Any],
                 tuned: Mapping[str, Any]) -> tuple[float, ...] | None:
    """The default nearest-key rule: ``(sum over ordinal axes of |log2 a - log2 b|,
    -t1, -t2, ...)`` with ``t`` the tuned ordinal values (a tie goes to the larger tuned
    value); ``None`` when an ordinal value of either key is not an int."""
    total = 0.0
    larger: list[float] = []
    for axis in axes:
        if not axis.ordinal:
            continue
        a, t = asked.get(axis.name), tuned.get(axis.name)
        if type(a) is not int or type(t) is not int:
            return None
        total += abs(_log2(a) - _log2(t))
        larger.append(-float(t))
    return (total, *larger)


def _log2(value: int) -> float:
    return math.log2(max(value, 1))
