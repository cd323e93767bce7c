"""The order of equally near tuned keys: a family's ``tie_rank``.

The nearest-key step ranks tuned keys by standing, then by the family's ``key_distance``
(:mod:`flyconfigs.registry.search.matching`).  Keys of one standing whose distances share their
**first element** are equally near: by default the rest of the distance orders them, then
the sources' order.  A family that frames its framework's lookup more closely gives
``tie_rank(asked, tie)``: each such key is offered as a :class:`Tie` and the keys are
served in the order of the ranks it answers, the smaller first (a stable sort: equal ranks
keep the default order).  The copies of one key (two folders' files, two runs in one
folder) all rank as the copy precedence puts first (the one the exact step serves), so
the others follow it: a rank orders keys, never the copies of one key.  The rank replaces the rest of the distance: a family that wants
it kept puts ``tie.distance[1:]`` first in its rank.

Two frameworks' rules are expressed through it:

- **the upstream file's order** (vLLM takes the first of its file's equally near batch
  sizes): :func:`file_order` ranks the rows of one table (an imported file keeps its
  order) by row, and keys of different files in the order the default meets them, so a
  key is never ranked against another file's row number;
- **what the artifacts report** (aiter's retry takes the lowest ``us``, or its default
  file's row first): the rank reads ``tie.artifact``, which is loaded only when asked.

A ``tie_rank`` that raises or answers anything but a tuple of numbers is reported once
(``kernel-error``) and the default order stands; serving never breaks.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.families.contract import KernelDecl, KeyValue
from flyconfigs.registry.families.family import Family
from flyconfigs.registry.families.offers import Tie, file_order
from flyconfigs.registry.sources.entries import Entry
from flyconfigs.schema.canonical import canonical_text

if TYPE_CHECKING:
    pass

__all__ = ["Tie", "file_order", "has_own_tie_rank", "ties_ordered"]


def has_own_tie_rank(decl: KernelDecl) -> bool:
    """Whether ``decl`` gives its own ``tie_rank`` (else ties keep the default order, and
    no tie is ever built)."""
    return "tie_rank" in vars(decl) or type(decl).tie_rank is not KernelDecl.tie_rank


def ties_ordered(family: Family, key: dict[str, KeyValue],
                 ranked: list[tuple[Entry, tuple[float, ...]]]) -> list[tuple[Entry, tuple[float, ...]]]:
    """``ranked`` (the nearest-key step's default order) with each run of entries of one
    tier and one first distance element ordered by the family's ``tie_rank``: a stable
    sort, so equal ranks keep the default order, and the copies of one key keep
    precedence's order (:func:`_ranks`).  A rank that raises or is not a tuple of
    numbers is reported once (:meth:`Family.tie_rank`) and leaves the run as it was."""
    if not family.own_tie_rank:
        return ranked
    out: list[tuple[Entry, tuple[float, ...]]] = []
    for _, run in itertools.groupby(ranked, key=lambda item: (item[0].source.tier, item[1][:1])):
        tied = list(run)
        if len(tied) > 1:
            ranks = _ranks(family, key, tied)
            if ranks is not None:
                order = sorted(range(len(tied)), key=ranks.__getitem__)
                tied = [tied[i] for i in order]
        out.extend(tied)
    return out


def _ranks(family: Family, key: dict[str, KeyValue],
           tied: list[tuple[Entry, tuple[float, ...]]]) -> list[tuple[float, ...]] | None:
    """Each tied entry's rank (``None`` when one fails): the family's, except that every
    copy of a key ranks as the key's first copy does (in the default order, which is
    precedence among the copies of one key: the copy the exact step would serve), so that
    a stable sort keeps the others after it.  A rank orders keys; it never lets a copy
    that precedence shadows (another folder's, an older run's) serve before the one that
    serves the key exactly."""
    by_key: dict[str, tuple[float, ...]] = {}
    ranks = []
    for (entry, _), tie in zip(tied, _ties(tied, family.problems), strict=True):
        rank = family.tie_rank(key, tie)
        if rank is None:
            return None
        ranks.append(by_key.setdefault(canonical_text(entry.key), rank))
    return ranks


def _ties(tied: list[tuple[Entry, tuple[float, ...]]], problems: ProblemLog) -> list[Tie]:
    """``tied`` as :class:`Tie` objects, their files numbered in order of appearance."""
    files: dict[object, int] = {}
    out = []
    for entry, distance in tied:
        out.append(Tie(entry, distance, files.setdefault(entry.place()[0], len(files)), problems))
    return out
