"""The nearest-key rule of a family: how far a tuned key is from the asked one, and
whether a nearer key's winner may serve the asked key.

Two optional members of :class:`~flyconfigs.registry.declarations.KernelDecl` carry a
family's own rule, and this module calls them the way the resolver's nearest-key step
needs: a member that raises or answers something of the wrong type is reported once
(``kernel-error``) and never breaks a serving call.

- ``key_distance(asked, tuned) -> tuple[float, ...] | None``: the resolver offers only
  tuned keys equal to the asked key on every exact (non-ordinal) axis but the family's
  ``relaxed_axes``, ranks them by this value (tuples compare lexicographically, the
  smaller serves first) and never serves one for which it is ``None``.  Default (:func:`log_distance`): the sum over ordinal axes of
  ``|log2 a - log2 b|``, a tie to the larger tuned value.
- ``pass_over_neighbour(asked, tuned, config, device) -> str | None``: a reason to pass
  over the winner of the nearer key ``tuned`` (``config``, as it would be served) for the
  asked key; the next candidate is tried, and in the end the family's default.  The reason
  is kept in the :class:`~flyconfigs.registry.records.Resolution`'s ``reasons`` and
  printed by ``explain``.  Default: ``None``.

The order of keys equally near by the first element of ``key_distance`` is a third
member's, ``tie_rank(asked, tie)`` (the upstream file's order for vLLM, what the
artifacts report for aiter): :mod:`flyconfigs.registry.ties` calls it checked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flyconfigs.registry.contract import KernelDecl, KeyAxis, KeyValue
    from flyconfigs.registry.device import DeviceQuery
    from flyconfigs.registry.problems import ProblemLog

__all__ = ["has_own_distance", "log_distance", "neighbour_distance", "own_device_first", "passed_over"]


def log_distance(axes: Sequence[KeyAxis], asked: Mapping[str, KeyValue],
                 tuned: Mapping[str, KeyValue]) -> tuple[float, ...] | None:
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


def has_own_distance(decl: KernelDecl) -> bool:
    """Whether ``decl`` gives its own ``key_distance`` (else the resolver uses the
    default rule, precomputed for speed)."""
    from flyconfigs.registry.contract import KernelDecl

    return "key_distance" in vars(decl) or type(decl).key_distance is not KernelDecl.key_distance


def neighbour_distance(decl: KernelDecl, asked: Mapping[str, KeyValue], tuned: Mapping[str, KeyValue],
                       problems: ProblemLog | None = None) -> tuple[float, ...] | None:
    """``decl.key_distance(asked, tuned)`` checked: a tuple of numbers, or ``None``.
    One that raises or answers anything else is reported once and counts as ``None``
    (that key is not served for the asked one)."""
    from flyconfigs.registry.calls import report_fault

    try:
        distance = decl.key_distance(asked, tuned)
        if distance is None:
            return None
        if not isinstance(distance, tuple) or not all(
                isinstance(d, (int, float)) and not isinstance(d, bool) and not math.isnan(d) for d in distance):
            raise TypeError(f"it returned {distance!r}, not a tuple of numbers or None")
        return distance
    except Exception as exc:  # noqa: BLE001 - a plugin's rule failing must not break serving
        report_fault(decl, "key_distance", exc, "no nearer key is served where it fails", problems)
        return None


def passed_over(decl: KernelDecl, asked: Mapping[str, KeyValue], tuned: Mapping[str, KeyValue],
                config: Mapping[str, Any], device: DeviceQuery, problems: ProblemLog | None = None) -> str | None:
    """``decl.pass_over_neighbour(asked, tuned, config, device)`` checked: the family's
    reason to pass over that neighbour's winner, or ``None``.  One that raises or answers
    anything but a string or ``None`` is reported once and passes nothing over."""
    from flyconfigs.registry.calls import report_fault

    try:
        why = decl.pass_over_neighbour(asked, tuned, config, device)
        if why is not None and not isinstance(why, str):
            raise TypeError(f"it returned a {type(why).__name__}, not a str or None")
        return why
    except Exception as exc:  # noqa: BLE001 - a plugin's rule failing must not break serving
        report_fault(decl, "pass_over_neighbour", exc, "nearer keys' winners are served as if it said nothing",
                     problems)
        return None


def own_device_first(decl: KernelDecl, problems: ProblemLog | None = None) -> bool:
    """``decl.own_device_first`` checked: a member that raises or is not a bool is
    reported once and taken as ``False`` (the registry's own order)."""
    from flyconfigs.registry.calls import report_fault

    try:
        value = decl.own_device_first
        if type(value) is not bool:
            raise TypeError(f"it is a {type(value).__name__}, not a bool")
        return value
    except Exception as exc:  # noqa: BLE001 - a plugin's member failing must not break serving
        report_fault(decl, "own_device_first", exc, "an exact key on a sibling device serves first", problems)
        return False

