"""What ``doctor`` reads of a resolver: every collision between sources, with the winner
the search serves for its slot, and every problem of every artifact."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flyconfigs.errors import FlyconfigsError
from flyconfigs.registry.check import check_winner
from flyconfigs.registry.contest import find_collisions
from flyconfigs.registry.device import chosen_detector
from flyconfigs.registry.problems import Problem
from flyconfigs.registry.records import Collision, Resolution
from flyconfigs.registry.sources import Entry

if TYPE_CHECKING:
    from flyconfigs.registry.resolve import Resolver

__all__ = ["check_all", "collisions"]


def collisions(resolver: Resolver) -> list[Collision]:
    """Every collision between ``resolver``'s sources, each also logged once, its winner
    the artifact the search serves at that slot's key on that slot's device."""

    def served(entry: Entry) -> Resolution | None:
        try:
            return resolver.serving(entry.kernel, entry.key, entry.device)
        except FlyconfigsError:  # an undeclared kernel, or a key its family refuses: nothing serves it
            return None

    return find_collisions(list(resolver.all_entries()), resolver.problems, served)


def check_all(resolver: Resolver, installed_detector: bool) -> list[Problem]:
    """Load every artifact, check each winner with its kernel's declaration (when this
    environment declares the kernel) and find every collision; every problem seen so far.
    ``installed_detector``: also report detectors of other distributions competing with
    flyconfigs' own."""
    if installed_detector:
        chosen_detector(resolver.problems, resolver.kernels.environment)
    for entry in resolver.all_entries():
        artifact = entry.load(resolver.problems)
        if artifact is None:
            continue
        dist = entry.source.name if entry.source.kind == "package" else None
        check_winner(artifact, str(entry.path), resolver.problems, dist, resolver.kernels)
    collisions(resolver)
    return resolver.problems.problems()
