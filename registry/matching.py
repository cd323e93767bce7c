"""Matching, as pure functions of their inputs: an exact key, the nearest key on a
kernel's ordinal axes (standing first), and the order in which other products'
artifacts are tried."""

from __future__ import annotations

import math
import os

from flyconfigs.registry.contract import KernelDecl, KeyValue
from flyconfigs.registry.nearest import has_own_distance, neighbour_distance
from flyconfigs.registry.problems import ProblemLog
from flyconfigs.registry.sources import Entry
from flyconfigs.registry.tables import bulk_allocation
from flyconfigs.schema.canonical import canonical_text

__all__ = ["Pool", "by_product", "exact_matches", "nearest_matches", "nearest_ranked", "source_label"]


class Pool(list[Entry]):
    """A list of entries that keeps its grouping for matching (made on first use) with
    it, so the grouping lives exactly as long as the pool: a catalog's pools are never
    changed once built."""

    prepared: _Prepared | None = None


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
    """The entries of :func:`nearest_ranked`, in its order."""
    return [entry for entry, _ in nearest_ranked(pool, key, decl, problems)]


def nearest_ranked(pool: list[Entry], key: dict[str, KeyValue], decl: KernelDecl,
                   problems: ProblemLog | None = None) -> list[tuple[Entry, tuple[float, ...]]]:
    """Entries equal to ``key`` on every exact axis with their distance, in the
    nearest-key step's order: **standing first** (a source's tier), then the family's
    ``key_distance`` (:mod:`flyconfigs.registry.nearest`; by default the smallest sum over
    ordinal axes of ``|log2 a - log2 b|``, a tie to the larger tuned value), then pool
    order.  A higher-standing source's nearest key so goes before a lower one's nearer
    key: distance decides only among sources of one standing.  An entry the family's
    rule answers ``None`` for is left out."""
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
    scored: list[tuple[int, tuple[float, ...], int, Entry]] = []
    if has_own_distance(decl):
        for _, _, rank, entry in group:
            distance = neighbour_distance(decl, key, entry.key, problems)
            if distance is not None:
                scored.append((entry.source.rank[0], distance, rank, entry))
    else:
        wanted = [_log2(v) for v in asked]
        for logs, larger, rank, entry in group:
            total = sum(abs(t - w) for t, w in zip(logs, wanted, strict=True))
            scored.append((entry.source.rank[0], (total, *larger), rank, entry))
    # Ranks are unique, so the tuples never compare two entries.
    scored.sort(key=lambda item: item[:3])
    return [(item[3], item[1]) for item in scored]


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
            with bulk_allocation():
                groups = self._group(ordinal, exact)
            self._by_exact[(ordinal, exact)] = groups
        return groups

    def _group(self, ordinal: tuple[str, ...], exact: tuple[str, ...]) -> dict[tuple[object, ...], _Group]:
        groups: dict[tuple[object, ...], _Group] = {}
        for rank, entry in enumerate(self.pool):
            if not all(n in entry.key for n in (*ordinal, *exact)):
                continue
            tuned = [v for v in (entry.key[n] for n in ordinal) if type(v) is int]
            if len(tuned) != len(ordinal):
                continue
            groups.setdefault(_signature(entry.key, exact), []).append(
                (tuple(_log2(v) for v in tuned), tuple(-float(v) for v in tuned), rank, entry))
        return groups


def _prepared(pool: list[Entry]) -> _Prepared:
    """``pool`` grouped (see :class:`_Prepared`): kept with a :class:`Pool` (whose
    entries never change), made afresh for a plain list."""
    if isinstance(pool, Pool):
        if pool.prepared is None or pool.prepared.size != len(pool):
            with bulk_allocation():
                pool.prepared = _Prepared(pool)
        return pool.prepared
    with bulk_allocation():
        return _Prepared(pool)


def _log2(value: int) -> float:
    return math.log2(max(value, 1))


def source_label(entry: Entry) -> str:
    """``flyconfigs-sm90 2026.12.3 (file.json)`` for a package, the path for a folder."""
    if entry.source.kind == "package":
        return f"{entry.source.name} {entry.source.version} ({entry.path.name})"
    return str(entry.path)
