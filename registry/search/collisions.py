"""Collisions: several artifacts for one kernel, device and key.  Which one serves is
never decided here: the search (:mod:`flyconfigs.registry.search.steps`) decides, and this
module reports what it decided — the winner, the artifacts it shadows, a slot two
sources of one standing contest, and duplicates (two artifacts of one slot in one
source, of which the more recently made serves)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.search.matching import source_label
from flyconfigs.registry.search.preference import rank_key
from flyconfigs.registry.search.records import Collision, Resolution
from flyconfigs.registry.sources.entries import PACKAGES_ENV, Entry

__all__ = ["find_collisions"]

Served = Callable[[Entry], "Resolution | None"]


def find_collisions(entries: list[Entry], problems: ProblemLog, served: Served | None = None) -> list[Collision]:
    """Every group of entries for one kernel, device and key (ranked for the kernel's
    owner), in the search's order (standing, then measured before predicted, then the
    user's order, then the newer of a source's duplicates), with the winner ``served``
    names for the slot (the search run at that key on that device; without it, the
    first in order), or none when the best rank is shared by two sources (contested).
    Each is reported once (INFO when someone chose the order, else WARNING); each
    duplicate within one source is reported too (``duplicate``)."""
    slots: dict[tuple[object, ...], list[Entry]] = {}
    for entry in entries:
        slots.setdefault(entry.slot(), []).append(entry)
    found = []
    for group in slots.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda e: (e.source.tier, e.predicted(problems), rank_key(e)))  # measured first in a tier
        best = [e for e in group if e.source.rank == group[0].source.rank]
        contested = len({e.source.name for e in best}) > 1
        first = group[0]
        if served is not None and not contested:
            resolution = served(first)
            first = next((e for e in group if resolution is not None and str(e.path) == resolution.file), first)
        order = [first, *(e for e in group if e is not first)]
        _report_duplicates(order, problems)
        names = [source_label(e) for e in order]
        deliberate = not contested and (first.source.kind == "override" or all(e.source.standing == "chosen"
                                                                             for e in order))
        collision = Collision(first.kernel, dict(first.key), first.device, names[0], tuple(names[1:]), deliberate,
                              contested, tuple(e.source.standing for e in order))
        found.append(collision)
        where = f"{first.kernel} {dict(first.key)} on {first.device.describe()}: "
        if contested:
            ties = sorted({source_label(e) for e in best})
            message = (where + f"{' and '.join(ties)} claim it at the same precedence ({first.source.standing}); "
                       f"neither is served: rank them with {PACKAGES_ENV}")
        else:
            message = (where + f"{names[0]} ({first.source.standing}) wins over "
                       + ", ".join(f"{n} ({e.source.standing})" for e, n in zip(order[1:], names[1:], strict=True))
                       + ("" if deliberate else f" (nobody chose this order: rank packages with {PACKAGES_ENV})"))
        problems.report(Problem("collision", str(order[1].path), message), logging.INFO if deliberate else logging.WARNING)
    return found


def _report_duplicates(group: list[Entry], problems: ProblemLog) -> None:
    by_source: dict[str, list[Entry]] = {}
    for entry in group:
        by_source.setdefault(entry.source.name, []).append(entry)
    for name, same in by_source.items():
        if len(same) < 2:
            continue
        serves = same[0]
        for other in same[1:]:
            problems.report(Problem(
                "duplicate", str(other.path),
                f"{other.source.describe()} holds another artifact of {other.kernel} {dict(other.key)} on "
                f"{other.device.describe()}, {serves.path}, which serves instead (of one source's artifacts for one "
                f"slot the more recently made serves); remove one",
                name if other.source.kind == "package" else None))
