"""A neighbourhood rule for families whose nearest tuned key's winner is sometimes clearly
worse than another recorded config (RMSNorm's long rows between tuned sizes): a vote of
the device's own measurements at the tuned keys around the asked one.

The vote (:class:`NeighbourVote`, the defaults being the rule RMSNorm ships):

- neighbours: the tuned keys offered (one step, one standing, one device; nearest first)
  whose distance is within ``reach`` (1.0: one doubling of M or N) of the nearest one's,
  at most ``most`` of them; the first element of the family's ``key_distance`` is the
  distance (the sum of ``|log2 a - log2 b|`` over the ordinal axes by default);
- candidates: the ``top`` fastest configs each neighbour timed that the registry's checks
  accept for the asked key (and the family's default for it, where ``with_default``);
  where none of the neighbours' configs fits (a row no recorded vector width divides) the
  vote says nothing and the nearer key's winner, adapted, serves;
- score of a candidate: the mean over the neighbours of ``log(its time there / that
  neighbour's best)``, ``untimed`` where a neighbour did not time it, each neighbour
  weighted ``1 / (distance + soften)``; the lowest score is served (a tie to the earlier
  candidate: the nearer neighbour's faster config first, the default last).

Measured by a leave-one-out through the resolver over the committed sm90 artifacts
(``python -m bench.neighbour_vote``; docs/benchmarks.md has the figures).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from flyconfigs.registry.plugin import DeviceQuery, KernelDecl, KeyValue, Neighbour, check_config, config_token, default_config

__all__ = ["NeighbourVote", "VotesAmongNeighbours"]

@dataclass(frozen=True)
class NeighbourVote:
    """The vote's parameters (see the module docstring); :meth:`choose` is a family's
    ``choose_from_neighbours``."""

    reach: float = 1.0
    most: int = 8
    top: int = 3
    untimed: float = 0.35
    soften: float = 0.05
    with_default: bool = False
    """Whether the family's default for the asked key is a candidate too.  Off for RMSNorm:
    in the leave-one-out it changed the H100's figure by 0.0005 (1.0197x against 1.0202x
    over each key's best) and asking for RMSNorm's default searches its space on every
    resolve (about 20 ms), where the rest of the vote costs well under one."""

    def choose(self, decl: KernelDecl, asked: Mapping[str, KeyValue], neighbours: Iterable[Neighbour],
               device: DeviceQuery) -> tuple[dict[str, KeyValue], str] | None:
        """The config with the lowest score for ``asked`` and why, or ``None`` when no
        neighbour timed anything (a predicted artifact) or no candidate fits ``asked``."""
        near = self._near(neighbours)
        if not near:
            return None
        defaults = decl.tunable_defaults

        def slot(config: Mapping[str, KeyValue]) -> Hashable:
            return config_token(config, defaults)

        bests = [n.timings[0][1] for n in near]
        weights = [1.0 / (_first(n) + self.soften) for n in near]
        offered: dict[Hashable, dict[str, KeyValue]] = {}
        for n in near:
            for config, _ in n.timings[:self.top]:
                offered.setdefault(slot(config), dict(config))
        fits = {s: c for s, c in offered.items() if check_config(decl, c, asked, device) is None}
        if not fits:
            # Nothing the neighbours timed runs at this key (a row no recorded vector width
            # divides): no evidence to vote on, so the nearer key's winner, adapted, serves.
            return None
        fallback = default_config(decl, asked, device) if self.with_default else None
        if fallback is not None and check_config(decl, fallback, asked, device) is None:
            fits.setdefault(slot(fallback), fallback)
            offered.setdefault(slot(fallback), fallback)

        def score(s: Hashable) -> float:
            config = offered[s]
            total = 0.0
            for w, b, neighbour in zip(weights, bests, near, strict=True):
                time = neighbour.time_of(config)
                total += w * (math.log(time / b) if time is not None else self.untimed)
            return total / sum(weights)

        best = min(fits, key=score)
        nearest = slot(near[0].winner)
        offered.setdefault(nearest, dict(near[0].winner))
        against = (f"the nearest key's winner {score(nearest):.3f}" if nearest in fits
                   else "the nearest key's winner does not fit this key")
        what = "the default" if fallback is not None and best == slot(fallback) else "a recorded config"
        return fits[best], (f"{what} has the lowest weighted mean log time over the best at {len(near)} tuned "
                            f"key(s) within {self.reach:g} of the nearest: {score(best):.3f} ({against})")

    def _near(self, neighbours: Iterable[Neighbour]) -> list[Neighbour]:
        """The neighbours that vote: timed ones within reach of the first, at most
        :attr:`most`; stops reading at the first one beyond."""
        near: list[Neighbour] = []
        first: float | None = None
        for neighbour in neighbours:
            distance = _first(neighbour)
            if first is None:
                first = distance
            if distance > first + self.reach:
                break
            if neighbour.timings and neighbour.timings[0][1] > 0:
                near.append(neighbour)
                if len(near) == self.most:
                    break
        return near


def _first(neighbour: Neighbour) -> float:
    """The neighbour's distance: the first element of the family's ``key_distance``."""
    return float(neighbour.distance[0]) if neighbour.distance else 0.0


class VotesAmongNeighbours(KernelDecl):
    """A family whose neighbourhood rule is :attr:`neighbour_vote` (a base class beside
    its others)."""

    neighbour_vote = NeighbourVote()

    def choose_from_neighbours(self, asked: Mapping[str, KeyValue], neighbours: Iterable[Neighbour],
                               device: DeviceQuery) -> tuple[dict[str, KeyValue], str] | None:
        """The config :attr:`neighbour_vote` chooses from the device's measurements at the
        tuned keys around ``asked`` (see :mod:`flyconfigs.kernels.neighbour_vote`)."""
        return self.neighbour_vote.choose(self, asked, neighbours, device)
