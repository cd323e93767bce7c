"""Matching, as pure functions of their inputs: an exact key, the nearest key on a
kernel's ordinal axes, the order in which other products' artifacts are tried, and
collisions between sources (with their labels)."""

from __future__ import annotations

import logging
import math
import os
import threading

from flyconfigs.registry.declarations import KernelDecl, KeyValue
from flyconfigs.registry.nearest import has_own_distance, neighbour_distance
from flyconfigs.registry.problems import Problem, ProblemLog
from flyconfigs.registry.records import Collision
from flyconfigs.registry.sources import PACKAGES_ENV, Entry
from flyconfigs.schema.canonical import canonical_text

__all__ = ["by_product", "exact_matches", "find_collisions", "nearest_matches", "source_label"]


def exact_matches(pool: list[Entry], key: dict[str, KeyValue]) -> list[Entry]:
    """The entries of ``pool`` whose key is ``key``, in pool order."""
    return list(_prepared(pool).exact.get(canonical_text(key), ()))


def by_product(pool: list[Entry], product: str | None) -> list[Entry]:
    """``pool`` in source order and, within each source, the products whose names share
    the longest prefix with ``product`` first (then by name): the order in which a step
    that accepts another product's artifacts tries them, so a device is served one
    product's tunings wherever that product has the key, not whichever file comes first."""
    asked = product or ""

    def order(entry: Entry) -> tuple[tuple[int, int], int, str]:
        name = entry.device.product or ""
        return entry.source.rank, -len(os.path.commonprefix([name, asked])), name

    return sorted(pool, key=order)


def nearest_matches(pool: list[Entry], key: dict[str, KeyValue], decl: KernelDecl,
                    problems: ProblemLog | None = None) -> list[Entry]:
    """Entries equal to ``key`` on every exact axis, nearest first by the family's
    ``key_distance`` (:mod:`flyconfigs.registry.nearest`; by default the smallest sum over
    ordinal axes of ``|log2 a - log2 b|``, a tie to the larger tuned value), then pool
    order; an entry the family's rule answers ``None`` for is left out."""
    ordinal = tuple(a.name for a in decl.key_axes if a.ordinal)
    if not ordinal:
        return []
    exact = tuple(a.name for a in decl.key_axes if not a.ordinal)
    try:
        asked = [key[n] for n in ordinal]
        group = _prepared(pool).by_exact(ordinal, exact).get(_signature(key, exact))
    except KeyError:  # the key lacks an axis of the declaration: no entry can match it
        return []
    if not group or not all(type(v) is int for v in asked):
        return []
    if has_own_distance(decl):
        ranked = []
        for _, _, rank, entry in group:
            distance = neighbour_distance(decl, key, entry.key, problems)
            if distance is not None:
                ranked.append((distance, rank, entry))
        ranked.sort(key=lambda item: (item[0], item[1]))
        return [item[2] for item in ranked]
    wanted = [_log2(v) for v in asked]
    if len(wanted) == 2:  # the common case (M and N), without a generator per entry
        w0, w1 = wanted
        scored = [(abs(logs[0] - w0) + abs(logs[1] - w1), larger, rank, entry) for logs, larger, rank, entry in group]
    else:
        scored = [(sum(abs(t - w) for t, w in zip(logs, wanted, strict=True)), larger, rank, entry)
                  for logs, larger, rank, entry in group]
    # Ranks are unique, so the tuples order by (distance, larger tuned value, pool order)
    # and never compare two entries.
    scored.sort()
    return [item[3] for item in scored]


def _signature(key: dict[str, KeyValue], exact: tuple[str, ...]) -> tuple[object, ...]:
    """What an entry must share with an asked key to be its neighbour: the same axes, and
    the same JSON value on every exact axis (types included: ``1`` is not ``1.0``)."""
    return (frozenset(key), *(canonical_text(key[n]) for n in exact))


_Group = list[tuple[tuple[float, ...], tuple[float, ...], int, Entry]]


class _Prepared:
    """A pool's entries grouped once for matching: by canonical key, and by the exact-axis
    signature of each declaration's axes with each entry's ordinal ``log2`` values."""

    def __init__(self, pool: list[Entry]) -> None:
        self.pool = pool
        self.size = len(pool)
        self.exact: dict[str, list[Entry]] = {}
        for entry in pool:
            self.exact.setdefault(canonical_text(entry.key), []).append(entry)
        self._by_exact: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[tuple[object, ...], _Group]] = {}

    def by_exact(self, ordinal: tuple[str, ...], exact: tuple[str, ...]) -> dict[tuple[object, ...], _Group]:
        groups = self._by_exact.get((ordinal, exact))
        if groups is None:
            groups = {}
            for rank, entry in enumerate(self.pool):
                if not all(n in entry.key for n in (*ordinal, *exact)):
                    continue
                tuned = [v for v in (entry.key[n] for n in ordinal) if type(v) is int]
                if len(tuned) != len(ordinal):
                    continue
                groups.setdefault(_signature(entry.key, exact), []).append(
                    (tuple(_log2(v) for v in tuned), tuple(-float(v) for v in tuned), rank, entry))
            self._by_exact[(ordinal, exact)] = groups
        return groups


_PREPARED: dict[int, _Prepared] = {}
_PREPARED_LIMIT = 256
_PREPARED_LOCK = threading.Lock()


def _prepared(pool: list[Entry]) -> _Prepared:
    """``pool`` grouped (see :class:`_Prepared`), made once per pool.  A resolver's pools
    are lists its catalog builds once and never changes; the cache holds each pool it
    grouped, so an id is never reused while cached, and a pool whose length changed is
    grouped again."""
    with _PREPARED_LOCK:
        found = _PREPARED.get(id(pool))
        if found is None or found.pool is not pool or found.size != len(pool):
            if len(_PREPARED) >= _PREPARED_LIMIT:
                _PREPARED.clear()
            found = _PREPARED[id(pool)] = _Prepared(pool)
        return found


def _log2(value: int) -> float:
    return math.log2(max(value, 1))


def find_collisions(entries: list[Entry], problems: ProblemLog) -> list[Collision]:
    """Every group of entries for one kernel, device and key (ranked for the kernel's
    owner), the first in the resolver's order winning (standing, then measured before
    predicted, then the user's order), or none when the best rank is shared (contested);
    each is reported once (INFO when someone chose the order, else WARNING)."""
    slots: dict[tuple[object, ...], list[Entry]] = {}
    for entry in entries:
        slots.setdefault(entry.slot(), []).append(entry)
    found = []
    for group in slots.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda e: _precedence(e, problems))
        names = [source_label(e) for e in group]
        contested = any(e.source.rank == group[0].source.rank for e in group[1:])
        deliberate = not contested and (
            group[0].source.kind == "override" or all(e.source.standing == "chosen" for e in group))
        collision = Collision(group[0].kernel, dict(group[0].key), group[0].device, names[0], tuple(names[1:]),
                              deliberate, contested, tuple(e.source.standing for e in group))
        found.append(collision)
        where = f"{group[0].kernel} {dict(group[0].key)} on {group[0].device.describe()}: "
        if contested:
            ties = [n for e, n in zip(group, names, strict=True) if e.source.rank == group[0].source.rank]
            message = (where + f"{' and '.join(ties)} claim it at the same precedence ({group[0].source.standing}); "
                       f"neither is served: rank them with {PACKAGES_ENV}")
        else:
            message = (where + f"{names[0]} ({group[0].source.standing}) wins over "
                       + ", ".join(f"{n} ({e.source.standing})" for e, n in zip(group[1:], names[1:], strict=True))
                       + ("" if deliberate else f" (nobody chose this order: rank packages with {PACKAGES_ENV})"))
        problems.report(Problem("collision", str(group[1].path), message), logging.INFO if deliberate else logging.WARNING)
    return found


def _precedence(entry: Entry, problems: ProblemLog) -> tuple[int, bool, int]:
    artifact = entry.load(problems)
    return entry.source.rank[0], artifact is not None and artifact.selection.rule == "predicted", entry.source.rank[1]


def source_label(entry: Entry) -> str:
    """``flyconfigs-sm90 2026.12.3 (file.json)`` for a package, the path for a folder."""
    if entry.source.kind == "package":
        return f"{entry.source.name} {entry.source.version} ({entry.path.name})"
    return str(entry.path)
