"""Where cross-checks go and what they found: each key tuned first on one worker is
re-tuned on a twin (another worker whose device has the same identity), the checks
spread evenly over the twins and onto other nodes first; a lost twin's checks move to
the twins given the fewest; the keys whose two tunings chose different winners are
reported."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flyconfigs.schema.canonical import same_value
from flyconfigs.schema.models import Artifact

__all__ = ["disagreements", "reassign_check", "spread_cross_checks"]


def spread_cross_checks(first: dict[int, int], identities: Sequence[Any], nodes: Sequence[str] | None = None,
                        alive: Sequence[bool] | None = None) -> list[list[int]]:
    """For each key (tuned first on worker ``first[key]``), the worker that re-tunes it:
    another worker of the same device identity (still ``alive``, when that is given).

    The checks spread as evenly as that rule allows: the workers of one identity get
    their keys' count divided among them, differing by one at most, except that a worker
    can check only the keys it did not tune first (one that tuned most of them first
    checks all the others, and the rest are divided among its twins).  Within that, keys
    go to a worker on another node when ``nodes`` names one with room.  Keys with no twin
    are not re-checked."""
    count = len(identities)
    usable = [alive is None or alive[s] for s in range(count)]
    pinned: list[list[int]] = [[] for _ in identities]
    groups: dict[int, list[int]] = {}
    for slot in range(count):
        if usable[slot]:
            groups.setdefault(next(s for s in range(count) if identities[s] == identities[slot]), []).append(slot)
    for group in groups.values():
        keys = [i for i in sorted(first) if identities[first[i]] == identities[group[0]]
                and any(s != first[i] for s in group)]
        own = {s: sum(1 for i in keys if first[i] == s) for s in group}
        target = _even_targets(len(keys), group, {s: len(keys) - own[s] for s in group}, own)
        where = _place_checks(keys, first, group, target, nodes)
        for index, slot in where.items():
            pinned[slot].append(index)
    for chosen in pinned:
        chosen.sort()
    return pinned


def _even_targets(total: int, group: list[int], capacity: dict[int, int], own: dict[int, int]) -> dict[int, int]:
    """``total`` checks divided over ``group`` as evenly as each worker's ``capacity``
    (the keys it did not tune first) allows; an extra check goes to the workers that
    tuned the fewest keys first.  Any two workers tuned first on different workers can
    share every key, so capacities are the only limit and the targets can be met."""
    target: dict[int, int] = {}
    left, open_ = total, list(group)
    while open_:
        base = left // len(open_)
        full = [s for s in open_ if capacity[s] <= base]
        if not full:
            extra = left - base * len(open_)
            ranked = sorted(open_, key=lambda s: (own[s], s))
            target.update({s: base + (1 if n < extra else 0) for n, s in enumerate(ranked)})
            break
        for s in full:
            target[s] = capacity[s]
            left -= capacity[s]
            open_.remove(s)
    return target


def _place_checks(keys: list[int], first: dict[int, int], group: list[int], target: dict[int, int],
                  nodes: Sequence[str] | None) -> dict[int, int]:
    """Each key to a worker of ``group`` other than its first, at most ``target`` each:
    greedily (another node first), then moved along augmenting paths until no worker
    is over its target."""
    def allowed(index: int) -> list[int]:
        others = [s for s in group if s != first[index]]
        if nodes is None:
            return others
        return sorted(others, key=lambda s: nodes[s] == nodes[first[index]])  # another node first

    load = dict.fromkeys(group, 0)
    where: dict[int, int] = {}
    for index in keys:
        choices = allowed(index)
        room = [s for s in choices if load[s] < target[s]]
        elsewhere = [s for s in room if nodes is not None and nodes[s] != nodes[first[index]]]
        slot = min(elsewhere or room or choices, key=lambda s: (load[s], s))
        where[index] = slot
        load[slot] += 1
    for start in group:
        while load[start] > target[start]:
            parent: dict[int, tuple[int, int]] = {}
            frontier, end = [start], None
            while frontier and end is None:
                step = []
                for u in frontier:
                    for index in (i for i, s in where.items() if s == u):
                        for v in allowed(index):
                            if v != start and v not in parent:
                                parent[v] = (u, index)
                                if load[v] < target[v]:
                                    end = v
                                    break
                                step.append(v)
                        if end is not None:
                            break
                    if end is not None:
                        break
                frontier = step
            if end is None:
                break
            v = end
            while v != start:
                u, index = parent[v]
                where[index] = v
                load[v] += 1
                load[u] -= 1
                v = u
    return where


def reassign_check(twins: Sequence[int], given: Sequence[int], elsewhere: Sequence[bool]) -> int | None:
    """The twin a lost worker's cross-check moves to: the one given the fewest checks
    so far, on another node than the key's first worker where that ties; ``None`` when
    no twin is left (the key is not re-checked)."""
    if not twins:
        return None
    return min(twins, key=lambda n: (given[n], not elsewhere[n], n))


def disagreements(keys: Sequence[dict[str, Any]], found: dict[int, list[tuple[int, Artifact]]]) -> list[dict[str, Any]]:
    """The keys whose first two tunings chose different winners, in key order."""
    return [_disagreement(keys[i], pair) for i, pair in sorted(found.items())
            if len(pair) > 1 and not same_value(pair[0][1].winner.config, pair[1][1].winner.config)]


def _disagreement(key: dict[str, Any], found: list[tuple[int, Artifact]]) -> dict[str, Any]:
    (_, a), (_, b) = found[0], found[1]
    ta, tb = a.winner.timing, b.winner.timing
    band = max(ta.noise, tb.noise, 0.01) if ta and tb else None
    return {
        "key": key,
        "devices": [a.device.ordinal, b.device.ordinal],
        "hosts": [a.provenance.host, b.provenance.host],
        "winners": [dict(a.winner.config), dict(b.winner.config)],
        "medians_us": [ta.median_us if ta else None, tb.median_us if tb else None],
        "within_noise": bool(ta and tb and band is not None and abs(ta.median_us - tb.median_us) <= band * min(ta.median_us, tb.median_us)),
    }
