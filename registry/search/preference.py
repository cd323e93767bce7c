"""Which candidate serves first: the one order of preference, :func:`rank_key`, and the
filters a step applies over it.  ``docs/resolution.md`` explains it; every sort of
candidates in the registry (a pool's order, the nearest-key step's, a collision's
winner) is this key.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol, TypeVar

__all__ = ["Ranked", "in_preference", "rank_key"]


class _Source(Protocol):
    @property
    def tier(self) -> int: ...

    @property
    def rank(self) -> tuple[int, int]: ...


class _Device(Protocol):
    @property
    def product(self) -> str | None: ...


class Ranked(Protocol):
    """What the order reads of a candidate (an entry, or a table's rows as one source offers them)."""

    @property
    def source(self) -> _Source: ...

    @property
    def device(self) -> _Device: ...

    @property
    def created(self) -> str | None: ...


def rank_key(entry: Ranked, distance: tuple[float, ...] = (), product: str | None = None) -> tuple[object, ...]:
    """The preference among the candidates of one search step, the smaller first.

    The steps come first and are not part of the key: the same product with the exact
    key, the same arch and compute units with the exact key, those two layers with the
    nearest key (a family whose ``own_device_first`` is true takes the asked product's
    nearest key before the sibling's exact key), then the same arch only (*borrowed*),
    exact key then nearest key; a family whose ``device_match`` is ``product`` is served
    the first layer only.  An exact measurement of the asked key, of any standing, so
    serves before any source's nearest key.  Within a step:

    1. **the source's tier** (:attr:`Source.tier <flyconfigs.registry.sources.entries.Source.tier>`):
       ``FLYCONFIGS_PATH`` folders, the packages ``FLYCONFIGS_PACKAGES`` lists, the
       family owner's packages, the official ``flyconfigs-<target>``, third parties.
       A higher standing serves before a lower one even where the lower one's key is
       nearer; only the user's settings and the family's declaration move a source;
    2. **the distance** (the nearest-key step): the family's ``key_distance(asked,
       tuned)``, by default the sum over ordinal axes of ``|log2 a - log2 b|``, a tie
       to the larger tuned value; keys whose distances share their first element are
       ordered by the family's ``tie_rank`` where it gives one (every copy of a key
       ranked as its first copy: :func:`~flyconfigs.registry.search.ties.ties_ordered`);
    3. **the source's place in its tier** (the order of ``FLYCONFIGS_PATH`` or
       ``FLYCONFIGS_PACKAGES``; ``Source.rank[1]``);
    4. where the step accepts other products (``product`` given), **the nearer product**:
       the longer common prefix of the product names with the asked ``product``, then
       the name;
    5. within one source, **the most recently made** (its provenance's ``created``;
       applied by :func:`in_preference`, which sorts by it first), then the order found
       (a table's rows in their row order).

    The filters, in the step's walk over that order: a tuned key the family's
    ``check_key`` refuses, a stale or refused artifact (:func:`~flyconfigs.registry.checks.check.refusal`)
    and a winner the family passes over (``pass_over_neighbour``) are skipped; a slot
    two sources of one rank claim is **contested** and never served; a predicted
    artifact serves only where its tier has no usable measured one (measured before
    predicted, asked lazily: a package's label is known once its file is read), and a
    same-product prediction gives way to a same-arch-and-compute-units measurement of
    its tier or better.  Where nothing serves, the family's default does."""
    source = entry.source
    if product is None:
        return (source.tier, distance, source.rank[1])
    name = entry.device.product or ""
    return (source.tier, distance, source.rank[1], -len(os.path.commonprefix([name, product])), name)


R = TypeVar("R", bound=Ranked)


def in_preference(units: Sequence[R], product: str | None = None) -> list[R]:
    """``units`` in :func:`rank_key` order (``product``: the asked product, for a step
    that accepts others; ``""`` when unknown), the most recently made first among equal
    keys, then as given (a stable sort: a table's rows keep their place together)."""
    by_time = sorted(units, key=lambda e: e.created or "", reverse=True)
    return sorted(by_time, key=lambda e: rank_key(e, (), product))
