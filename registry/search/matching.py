"""Matching, as pure functions of their inputs: an exact key, the nearest key on a
kernel's ordinal axes (standing first), and the order in which other products'
artifacts are tried.

A pool is a catalog's entries for one device token in precedence order, where a table's
rows stand as one :class:`~flyconfigs.registry.sources.blocks.TableBlock`: matching looks a key
up in the table's index of keys and makes entries of the rows it matches only, so a
table of thousands of rows costs a search the rows it weighs, not one object per row."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from flyconfigs.registry.core.collector import collector_paused
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.families.contract import KernelDecl, KeyValue
from flyconfigs.registry.families.family import Family
from flyconfigs.registry.search.preference import in_preference, rank_key
from flyconfigs.registry.search.ties import ties_ordered
from flyconfigs.registry.sources.blocks import TableBlock
from flyconfigs.registry.sources.entries import Entry
from flyconfigs.schema.canonical import canonical_text

__all__ = ["Pool", "PoolItem", "by_product", "exact_matches", "nearest_matches", "nearest_ranked",
           "relaxed_axes", "source_label"]

PoolItem = Entry | TableBlock
"""What a pool holds: an entry, or a table's rows as one source offers them."""
Item = TypeVar("Item", Entry, PoolItem)


class Pool:
    """Entries and tables' rows, with their grouping for matching made on first use (the
    pool's tables read then, those that fail left out, and the rest put in precedence
    order, :func:`~flyconfigs.registry.search.preference.in_preference`, then in ``order`` when given), so the grouping lives
    exactly as long as the pool: a catalog's pools are never changed once built."""

    def __init__(self, units: Iterable[PoolItem] = (),
                 order: Callable[[list[PoolItem]], list[PoolItem]] | None = None) -> None:
        self.units: list[PoolItem] = list(units)
        self.order = order
        self.prepared: _Prepared | None = None

    def append(self, unit: PoolItem) -> None:
        """Add ``unit`` last (while the catalog builds the pool)."""
        self.units.append(unit)
        self.prepared = None

    def claimants(self, entry: Entry) -> set[str]:
        """The sources whose entries here claim ``entry``'s kernel, device and key at
        ``entry``'s standing (``entry``'s own among them)."""
        prepared = _prepared(self)
        claim = (entry.source.rank, *entry.slot())
        kernel, layer, text = claim[1:]
        names = set(prepared.claims().get(claim, ()))
        for _, block in prepared.blocks:
            if (block.source.rank == entry.source.rank and block.kernel == kernel
                    and block.device.layers()[0] == layer and block.row_of(entry.key, str(text)) is not None):
                names.add(block.source.name)
        return names


def exact_matches(pool: Pool | list[Entry], key: dict[str, KeyValue]) -> list[Entry]:
    """The entries of ``pool`` whose key is ``key``, in pool order."""
    return _prepared(pool).matching(key, canonical_text(key))


def by_product(pool: Sequence[Item], product: str | None) -> list[Item]:
    """``pool`` in the order a step that accepts other products tries it
    (:func:`~flyconfigs.registry.search.preference.rank_key` with the asked product)."""
    return in_preference(pool, product or "")


def nearest_matches(pool: Pool | list[Entry], key: dict[str, KeyValue], family: Family | KernelDecl,
                    problems: ProblemLog | None = None) -> list[Entry]:
    """The entries of :func:`nearest_ranked`, in its order (a bare declaration's faults
    reported to ``problems``, default the process-wide table's)."""
    if not isinstance(family, Family):
        family = Family.of_declaration(family, problems)
    return [entry for entry, _ in nearest_ranked(pool, key, family)]


def nearest_ranked(pool: Pool | list[Entry], key: dict[str, KeyValue],
                   family: Family) -> list[tuple[Entry, tuple[float, ...]]]:
    """Entries equal to ``key`` on every exact axis but the family's ``relaxed_axes``,
    with their distance, in :func:`~flyconfigs.registry.search.preference.rank_key` order (then
    the pool's order: a table's rows by the table's place, then the row's), equally near
    keys in the family's ``tie_rank`` order; an entry the family's ``key_distance``
    answers ``None`` for is left out."""
    decl = family.decl
    ordinal = tuple(a.name for a in decl.key_axes if a.ordinal)
    relaxed = family.relaxed_axes
    if not ordinal and not relaxed:
        return []
    exact = tuple(a.name for a in decl.key_axes if not a.ordinal and a.name not in relaxed)
    try:
        asked = [key[n] for n in ordinal]
        group = _prepared(pool).group(ordinal, exact, _signature(key, exact))
    except KeyError:  # the key lacks an axis of the declaration: no entry can match it
        return []
    if not group or not all(type(v) is int for v in asked):
        return []
    scored: list[tuple[tuple[object, ...], tuple[int, int], tuple[float, ...], Entry]] = []
    if family.own_distance:
        for _, _, place, entry in group:
            distance = family.distance(key, entry.key)
            if distance is not None:
                scored.append((rank_key(entry, distance), place, distance, entry))
    else:
        wanted = [_log2(v) for v in asked]
        for logs, larger, place, entry in group:
            distance = (sum(abs(t - w) for t, w in zip(logs, wanted, strict=True)), *larger)
            scored.append((rank_key(entry, distance), place, distance, entry))
    # Places are unique, so the tuples never compare two entries.
    scored.sort(key=lambda item: item[:2])
    ranked = [(item[3], item[2]) for item in scored]
    return ties_ordered(family, key, ranked)


def relaxed_axes(decl: KernelDecl, problems: ProblemLog | None = None) -> frozenset[str]:
    """``decl.relaxed_axes`` checked (:attr:`Family.relaxed_axes
    <flyconfigs.registry.families.family.Family.relaxed_axes>`, read whether or not the family
    gives its own ``key_distance``): names of its non-ordinal axes, or none."""
    family = Family.of_declaration(decl, problems)
    family.own_distance = True
    return family.relaxed_axes


def _signature(key: dict[str, KeyValue], exact: tuple[str, ...]) -> tuple[object, ...]:
    """What an entry must share with an asked key to be its neighbour: the same axes, and
    the same JSON value on every exact axis (types included: ``1`` is not ``1.0``)."""
    return (frozenset(key), *(canonical_text(key[n]) for n in exact))


_Group = list[tuple[tuple[float, ...], tuple[float, ...], tuple[int, int], Entry]]
"""Each neighbour's ordinal ``log2`` values, their negatives (a tie to the larger), its
place in the pool (a table's row: the table's place, then the row's) and the entry."""


class _Prepared:
    """A pool's entries grouped once for matching: by canonical key, and by the exact-axis
    signature of each declaration's axes with each entry's ordinal ``log2`` values; a
    table's rows through the table's own index of keys (:class:`TableBlock`)."""

    def __init__(self, units: list[PoolItem], size: int | None = None) -> None:
        self.size = len(units) if size is None else size
        """The size of the pool grouped (before its unreadable tables were left out)."""
        self.exact: dict[str, list[tuple[int, Entry]]] = {}
        self.plain: list[tuple[int, Entry]] = []
        self.blocks: list[tuple[int, TableBlock]] = []
        for place, unit in enumerate(units):
            if isinstance(unit, TableBlock):
                self.blocks.append((place, unit))
            else:
                self.plain.append((place, unit))
                self.exact.setdefault(canonical_text(unit.key), []).append((place, unit))
        self._by_exact: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[tuple[object, ...], _Group]] = {}
        self._claims: dict[tuple[object, ...], set[str]] | None = None

    def matching(self, key: dict[str, KeyValue], text: str) -> list[Entry]:
        """The entries whose key is ``key`` (of canonical text ``text``), in pool order."""
        found = list(self.exact.get(text, ()))
        for place, block in self.blocks:
            row = block.row_of(key, text)
            if row is not None:
                found.append((place, block.entry(row)))
        if self.blocks:
            found.sort(key=lambda pair: pair[0])
        return [entry for _, entry in found]

    def group(self, ordinal: tuple[str, ...], exact: tuple[str, ...], signature: tuple[object, ...]) -> _Group:
        """The neighbours an asked key of ``signature`` may take (:func:`_signature`)."""
        groups = self._by_exact.get((ordinal, exact))
        if groups is None:
            with collector_paused():
                groups = self._group(ordinal, exact)
            self._by_exact[(ordinal, exact)] = groups
        found = list(groups.get(signature, ()))
        for place, block in self.blocks:
            rows = block.ref.signed(ordinal, exact).get(signature, ())
            if rows:
                table = block.ref.table
                assert table is not None
                at = [table.columns.key.index(n) for n in ordinal]
                for row in rows:
                    tuned = [table.rows[row][i] for i in at]
                    found.append((tuple(_log2(v) for v in tuned), tuple(-float(v) for v in tuned), (place, row),
                                  block.entry(row)))
        return found

    def _group(self, ordinal: tuple[str, ...], exact: tuple[str, ...]) -> dict[tuple[object, ...], _Group]:
        groups: dict[tuple[object, ...], _Group] = {}
        for place, entry in self.plain:
            if not all(n in entry.key for n in (*ordinal, *exact)):
                continue
            tuned = [v for v in (entry.key[n] for n in ordinal) if type(v) is int]
            if len(tuned) != len(ordinal):
                continue
            groups.setdefault(_signature(entry.key, exact), []).append(
                (tuple(_log2(v) for v in tuned), tuple(-float(v) for v in tuned), (place, 0), entry))
        return groups

    def claims(self) -> dict[tuple[object, ...], set[str]]:
        """The sources claiming each (standing, kernel, device, key) among the entries
        that are not tables' rows (made on first use)."""
        if self._claims is None:
            claims: dict[tuple[object, ...], set[str]] = {}
            with collector_paused():
                for _, entry in self.plain:
                    claims.setdefault((entry.source.rank, *entry.slot()), set()).add(entry.source.name)
            self._claims = claims
        return self._claims


def _prepared(pool: Pool | list[Entry]) -> _Prepared:
    """``pool`` grouped (see :class:`_Prepared`): kept with a :class:`Pool` (whose
    entries never change), made afresh for a plain list."""
    if isinstance(pool, Pool):
        if pool.prepared is None or pool.prepared.size != len(pool.units):
            with collector_paused():
                ordered = in_preference([u for u in pool.units if not isinstance(u, TableBlock) or u.ready()])
                pool.prepared = _Prepared(ordered if pool.order is None else pool.order(ordered), len(pool.units))
        return pool.prepared
    with collector_paused():
        return _Prepared(list(pool))


def _log2(value: int) -> float:
    return math.log2(max(value, 1))


def source_label(entry: Entry) -> str:
    """``flyconfigs-sm90 2026.12.3 (file.json)`` for a package, the path for a folder."""
    if entry.source.kind == "package":
        return f"{entry.source.name} {entry.source.version} ({entry.path.name})"
    return str(entry.path)
