"""What ``doctor`` reads of a resolver: every collision between sources, with the winner
the search serves for its slot, and every problem of every artifact."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from flyconfigs.errors import FlyconfigsError
from flyconfigs.registry.check import check_table, check_winner
from flyconfigs.registry.contest import find_collisions
from flyconfigs.registry.device import chosen_detector
from flyconfigs.registry.problems import Problem
from flyconfigs.registry.records import Collision, Resolution
from flyconfigs.registry.sources import Entry
from flyconfigs.schema.canonical import key_texts

if TYPE_CHECKING:
    from flyconfigs.registry.resolve import Resolver
    from flyconfigs.registry.tables import TableRef

__all__ = ["check_all", "collisions"]


def collisions(resolver: Resolver) -> list[Collision]:
    """Every collision between ``resolver``'s sources, each also logged once, its winner
    the artifact the search serves at that slot's key on that slot's device.  A table's
    rows are told apart by their keys' canonical texts, a column at a time: only the rows
    whose slot something else claims too become entries."""

    def served(entry: Entry) -> Resolution | None:
        try:
            return resolver.serving(entry.kernel, entry.key, entry.device)
        except FlyconfigsError:  # an undeclared kernel, or a key its family refuses: nothing serves it
            return None

    plain = list(resolver.all_entries(tables=False))
    claims = Counter(entry.slot() for entry in plain)
    rows: list[tuple[tuple[object, ...], TableRef, int]] = []
    for ref in resolver.all_tables():
        table = ref.read(resolver.problems)
        if table is None:
            continue
        layer = table.device.identity.layers()[0]
        for index, text in enumerate(key_texts(table.columns.key, table.rows)):
            slot = (table.kernel.name, layer, text)
            claims[slot] += 1
            rows.append((slot, ref, index))
    shared = [ref.row_entry(index) for slot, ref, index in rows if claims[slot] > 1]
    return find_collisions([*plain, *resolver.ranked(list(shared))], resolver.problems, served)


def check_all(resolver: Resolver, installed_detector: bool) -> list[Problem]:
    """Load every artifact, check each winner with its kernel's declaration (when this
    environment declares the kernel), each table a column at a time
    (:func:`~flyconfigs.registry.check.check_table`), and find every collision; every
    problem seen so far.  ``installed_detector``: also report detectors of other
    distributions competing with flyconfigs' own."""
    if installed_detector:
        chosen_detector(resolver.problems, resolver.kernels.environment)
    for entry in resolver.all_entries(tables=False):
        artifact = entry.load(resolver.problems)
        if artifact is None:
            continue
        dist = entry.source.name if entry.source.kind == "package" else None
        check_winner(artifact, str(entry.path), resolver.problems, dist, resolver.kernels)
    for ref in resolver.all_tables():
        dist = ref.source.name if ref.source.kind == "package" else None
        check_table(ref, resolver.problems, dist, resolver.kernels)
    collisions(resolver)
    return resolver.problems.problems()
