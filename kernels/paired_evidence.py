"""The serving rule between tuned keys: the family's default, unless the device's own
measurements around the asked key say that another config beats it, and by how much.

Where the nearest-key step would serve a nearer key's winner, :class:`PairedEvidence`
(a family's ``choose_from_neighbours``) decides instead:

- past the range: where an ordinal axis of the asked key lies beyond every tuned key read
  (``N`` above the largest tuned row, say) and the family does not list that axis in
  ``transfers_past_range``, the default serves: a winner does not carry over where the
  kernel's resources change (RMSNorm's register budget past N = 16384);
- the evidence: the tuned keys within ``reach`` of the nearest one (at most ``most``);
  candidates are the nearest key's winner, every neighbour's winner and the configs each
  timed in the tuner's final protocol, each one the registry's checks accept for the
  asked key;
- paired: a candidate is compared with the family's default for the asked key only at
  the neighbours that timed both, each comparison ``log(t(candidate) / t(default))`` at
  that neighbour, weighted ``1 / (distance + soften)``; a comparison of two final timings
  is preferred: screen timings (a few samples, not interleaved with the default) count
  only for a candidate no neighbour timed in its final with the default;
- the margin: the candidate with the lowest weighted mean is served only when it beats
  the default by more than ``margin`` (the tuner's noise band plus the error of carrying a
  neighbour's advantage to another key, both calibrated on the measurements:
  ``python -m bench.neighbour_vote --calibrate``), else the default serves.

``confidence`` (RMSNorm's rule; ``paired-se`` in the benchmark) replaces the fixed
margins with a variance-aware test: the candidate serves only beyond the margin plus that
many standard errors of its paired comparisons, and only on evidence from both sides of the
asked value of every axis that does not transfer.

The reason returned says which evidence decided: the range, or the paired comparison
(how many neighbours, final or screen, the advantage against the margin).  Measured by
leave-one-out over the committed sm90 artifacts (``python -m bench.neighbour_vote``;
docs/benchmarks.md has the figures).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass

from flyconfigs.errors import FlyconfigsError
from flyconfigs.registry.plugin import DeviceQuery, KernelDecl, KeyValue, Neighbour, check_config, config_token, default_config

__all__ = ["DefaultUnlessEvidence", "PairedEvidence"]


@dataclass(frozen=True)
class PairedEvidence:
    """The rule's parameters (see the module docstring); :meth:`choose` is a family's
    ``choose_from_neighbours``."""

    margin: float = 0.015
    """Log advantage over the default a candidate must exceed (noise band + transfer
    error)."""
    screen_margin: float | None = 0.03
    """The margin for a candidate whose only comparisons involve a screen timing (a few
    samples, timed apart from the default's final); ``None``: such comparisons are no
    evidence."""
    pairs: int = 1
    pick: str = "spread"
    """``paired``: the candidate with the best paired advantage is weighed against the
    margin; ``spread``: the candidate with the lowest weighted mean time over each
    neighbour's best (over the neighbours that timed it, at least half of them by
    weight) is, alone."""
    versus: str = "asked"
    """``asked``: each neighbour compares the candidate with the family's default for the
    asked key, where it timed that config; ``tuned``: with the default the tuner timed
    at that neighbour (its own key's default, always in the final)."""
    """Fewest neighbours at which a candidate must have been timed with the default."""
    reach: float = 1.0
    most: int = 8
    soften: float = 0.05
    range_reach: float = 3.0
    """How far beyond the nearest key the range of each axis is read (a tuned key on the
    other side of the asked value, within this distance, means it is inside the range)."""
    range_most: int = 48
    confidence: float | None = None
    """``None``: the fixed margins above decide.  A number ``z``: every timed config of
    the neighbours is offered, and the one ``spread`` chooses (whatever :attr:`pick`
    says) is served only where
    its weighted mean paired advantage beats the default by more than ``z`` standard
    errors plus :attr:`margin`, the standard error from the spread of its paired
    comparisons and a noise floor of :attr:`noise` per final pair (``noise·√3`` per
    screen pair: a median of 5 samples against 15), over the effective number of pairs;
    every pair counts, final or screen, at its own noise; and only where the keys that
    timed it with the default lie on both sides of the asked value (or at it) on every
    ordinal axis the family does not list in ``transfers_past_range``.  Measured beside
    the fixed margins by ``python -m bench.neighbour_vote`` (rule ``paired-se``)."""
    noise: float = 0.01
    """The tuner's noise band: the least difference its final tells apart."""

    def choose(self, decl: KernelDecl, asked: Mapping[str, KeyValue], neighbours: Iterable[Neighbour],
               device: DeviceQuery, transfers: Collection[str] = ()) -> tuple[dict[str, KeyValue], str] | None:
        """The config to serve for ``asked`` and which evidence decided, or ``None`` (the
        nearest key's winner serves, as without the rule) where no neighbour timed
        anything or the family's default does not pass its own checks."""
        near, seen = self._read(neighbours, asked, decl, transfers)
        if not near:
            return None
        try:
            default = default_config(decl, asked, device)
        except FlyconfigsError:  # reported where it was raised; without a default there is nothing to weigh
            return None
        if check_config(decl, default, asked, device) is not None:
            return None
        past = _past_range(decl, asked, seen, transfers)
        if past:
            return default, f"the family's default: {past}, where no winner is carried over"
        defaults = decl.tunable_defaults

        def slot(config: Mapping[str, KeyValue]) -> Hashable:
            return config_token(config, defaults)

        home = slot(default)
        # A neighbour the registry made keeps its configs' slots, made with the family's
        # defaults: those are read, not made again (a rule weighs hundreds of configs).
        same = [n.defaults == defaults for n in near]
        offered: dict[Hashable, dict[str, KeyValue]] = {}
        for n in near:
            offered.setdefault(slot(n.winner), dict(n.winner))
        for n, agree in zip(near, same, strict=True):
            if agree:
                for s, (config, _) in zip(n.slots, n.timings, strict=True):
                    if s not in offered and (self.confidence is not None or n.final_at(s)):
                        offered[s] = dict(config)
                continue
            for config, _ in n.timings:
                if self.confidence is not None or n.timed_in(config) == "final":
                    offered.setdefault(slot(config), dict(config))
        offered.pop(home, None)
        space = _space(decl, asked, device)
        fits = [(s, c) for s, c in offered.items()
                if (space is None or s in space) and check_config(decl, c, asked, device) is None]
        weights = [1.0 / (_first(n) + self.soften) for n in near]
        best: tuple[float, float, dict[str, KeyValue], int, str] | None = None
        if self.pick == "spread" or self.confidence is not None:
            fits = self._spread(fits, near, weights, same)
        if self.confidence is not None:
            return self._confident([c for _, c in fits], default, near, weights, _one_sided(decl, asked, transfers))
        for token, config in fits:
            scored = self._paired(token, config, default, near, weights, same)
            if scored is None:
                continue
            mean, pairs, kind = scored
            margin = self.margin if kind == "final" else self.screen_margin
            if margin is None or pairs < self.pairs:
                continue
            if best is None or mean + margin < best[0] + best[1]:
                best = (mean, margin, config, pairs, kind)
        if best is None:
            return default, (f"the family's default: no candidate was timed with it at the {len(near)} tuned key(s) "
                             f"within {self.reach:g} of the nearest")
        mean, margin, config, pairs, kind = best
        gain = f"{-mean:.1%} faster than the default where both were timed ({pairs} of {len(near)} neighbour key(s), " \
               f"{kind} timings)"
        if mean < -margin:
            return config, f"paired evidence: {gain}, beyond the {margin:.1%} margin"
        return default, f"the family's default: the best candidate is {gain}, within the {margin:.1%} margin"

    def _confident(self, fits: list[dict[str, KeyValue]], default: dict[str, KeyValue], near: list[Neighbour],
                   weights: list[float], one_sided: Callable[[list[Neighbour]], str | None]
                   ) -> tuple[dict[str, KeyValue], str]:
        """The :attr:`confidence` test (see there) of the one candidate :attr:`pick` chooses."""
        assert self.confidence is not None
        pairs: list[tuple[float, float, float]] = []
        timed: list[Neighbour] = []
        for config in fits[:1]:
            for w, n in zip(weights, near, strict=True):
                mine, theirs = n.time_of(config), n.time_of(default)
                if mine is None or theirs is None or mine <= 0 or theirs <= 0:
                    continue
                both = n.timed_in(config) == "final" and n.timed_in(default) == "final"
                pairs.append((w, math.log(mine / theirs), self.noise if both else self.noise * math.sqrt(3.0)))
                timed.append(n)
        if not pairs:
            return default, (f"the family's default: no candidate was timed with it at the {len(near)} tuned key(s) "
                             f"within {self.reach:g} of the nearest")
        side = one_sided(timed)
        if side is not None:
            return default, f"the family's default: the best candidate was timed with it {side}"
        total = sum(w for w, _, _ in pairs)
        mean = sum(w * r for w, r, _ in pairs) / total
        spread = sum(w * ((r - mean) ** 2 + s * s) for w, r, s in pairs) / total
        error = math.sqrt(spread * sum(w * w for w, _, _ in pairs)) / total
        bound = self.margin + self.confidence * error
        gain = (f"{-mean:.1%} faster than the default where both were timed ({len(pairs)} of {len(near)} neighbour "
                f"key(s), standard error {error:.1%})")
        if mean < -bound:
            return fits[0], f"paired evidence: {gain}, beyond the {bound:.1%} margin"
        return default, f"the family's default: the best candidate is {gain}, within the {bound:.1%} margin"

    def _spread(self, fits: list[tuple[Hashable, dict[str, KeyValue]]], near: list[Neighbour],
                weights: list[float], same: list[bool]) -> list[tuple[Hashable, dict[str, KeyValue]]]:
        """The one candidate fastest over the neighbours' bests (see :attr:`pick`), or none."""
        total = sum(weights)
        scored: list[tuple[float, int, tuple[Hashable, dict[str, KeyValue]]]] = []
        for i, (token, config) in enumerate(fits):
            pairs = [(w, _time(n, agree, token, config), n.timings[0][1])
                     for w, n, agree in zip(weights, near, same, strict=True)]
            held = [(w, math.log(t / b)) for w, t, b in pairs if t is not None and t > 0]
            if sum(w for w, _ in held) * 2 < total:
                continue
            scored.append((sum(w * r for w, r in held) / sum(w for w, _ in held), i, (token, config)))
        return [min(scored)[2]] if scored else []

    def _paired(self, token: Hashable, config: Mapping[str, KeyValue], default: Mapping[str, KeyValue],
                near: list[Neighbour], weights: list[float], same: list[bool]) -> tuple[float, int, str] | None:
        """The weighted mean log time of ``config`` over ``default`` at the neighbours
        that timed both, the count, and ``final`` where final pairs exist (only those
        count then), else ``screen``; ``None`` where no neighbour timed both."""
        finals: list[tuple[float, float]] = []
        screens: list[tuple[float, float]] = []
        for w, n, agree in zip(weights, near, same, strict=True):
            home = default if self.versus == "asked" or n.tuned_default is None else n.tuned_default
            mine = _time(n, agree, token, config)
            if mine is None:
                continue
            theirs = n.time_of(home)
            if theirs is None or mine <= 0 or theirs <= 0:
                continue
            pair = (w, math.log(mine / theirs))
            both = (n.final_at(token) if agree else n.timed_in(config) == "final") and n.timed_in(home) == "final"
            (finals if both else screens).append(pair)
        pairs, kind = (finals, "final") if finals else (screens, "screen")
        if not pairs:
            return None
        return sum(w * r for w, r in pairs) / sum(w for w, _ in pairs), len(pairs), kind

    def _read(self, neighbours: Iterable[Neighbour], asked: Mapping[str, KeyValue], decl: KernelDecl,
              transfers: Collection[str]) -> tuple[list[Neighbour], list[Neighbour]]:
        """The neighbours that give evidence (timed, within :attr:`reach` of the first,
        at most :attr:`most`) and every one read: reading goes on within
        :attr:`range_reach` only until each axis that does not transfer has a tuned key on
        both sides of the asked value."""
        near: list[Neighbour] = []
        seen: list[Neighbour] = []
        first: float | None = None
        for neighbour in neighbours:
            distance = _first(neighbour)
            if first is None:
                first = distance
            if distance > first + self.range_reach or len(seen) >= self.range_most:
                break
            seen.append(neighbour)
            if distance <= first + self.reach and len(near) < self.most:
                if neighbour.timings and neighbour.timings[0][1] > 0:
                    near.append(neighbour)
            elif not _past_range(decl, asked, seen, transfers):
                break
        return near, seen


def _past_range(decl: KernelDecl, asked: Mapping[str, KeyValue], seen: list[Neighbour],
                transfers: Collection[str]) -> str | None:
    """What places ``asked`` past the tuned range of an ordinal axis that does not
    transfer (no key of ``seen`` at or beyond its value on one side), or ``None``."""
    for axis in decl.key_axes:
        if not axis.ordinal or axis.name in transfers:
            continue
        value = asked.get(axis.name)
        tuned = [k for k in (n.key.get(axis.name) for n in seen) if isinstance(k, (int, float))]
        if not isinstance(value, (int, float)) or not tuned:
            continue
        if value > max(tuned):
            return f"{axis.name}={value} is above the largest tuned {axis.name} near it ({max(tuned)})"
        if value < min(tuned):
            return f"{axis.name}={value} is below the smallest tuned {axis.name} near it ({min(tuned)})"
    return None


def _one_sided(decl: KernelDecl, asked: Mapping[str, KeyValue],
               transfers: Collection[str]) -> Callable[[list[Neighbour]], str | None]:
    """A check of the keys that timed a candidate with the default: where they all lie on
    one side of the asked value of an ordinal axis that does not transfer (none at or
    above it, or none at or below), what says so; else ``None``.  The evidence, like the
    winner, is not carried past what was measured."""
    def check(timed: list[Neighbour]) -> str | None:
        for axis in decl.key_axes:
            value = asked.get(axis.name)
            if not axis.ordinal or axis.name in transfers or not isinstance(value, (int, float)):
                continue
            held = [k for k in (n.key.get(axis.name) for n in timed) if isinstance(k, (int, float))]
            if held and max(held) < value:
                return f"only below {axis.name}={value} (at most {max(held)})"
            if held and min(held) > value:
                return f"only above {axis.name}={value} (at least {min(held)})"
        return None

    return check


def _space(decl: KernelDecl, asked: Mapping[str, KeyValue], device: DeviceQuery) -> set[Hashable] | None:
    """The configs the family would tune at ``asked`` (its ``space``, where it declares
    one), as slots; ``None`` where it declares none or it fails (no restriction)."""
    space = getattr(decl, "space", None)
    if not callable(space):
        return None
    try:
        return {config_token(c, decl.tunable_defaults) for c in space(asked, device)}
    except Exception:  # noqa: BLE001 - a family's space failing leaves the candidates as the checks accept them
        return None


def _time(neighbour: Neighbour, agree: bool, token: Hashable, config: Mapping[str, KeyValue]) -> float | None:
    """``neighbour``'s time of ``config`` (``token``, its slot with the family's defaults:
    read directly where the neighbour's defaults are the family's)."""
    return neighbour.time_at(token) if agree else neighbour.time_of(config)


def _first(neighbour: Neighbour) -> float:
    """The neighbour's distance: the first element of the family's ``key_distance``."""
    return float(neighbour.distance[0]) if neighbour.distance else 0.0


class DefaultUnlessEvidence(KernelDecl):
    """A family whose neighbourhood rule is :attr:`paired_evidence` (a base class beside
    its others): between tuned keys it serves its default unless paired measurements say
    otherwise.  ``transfers_past_range`` names the ordinal axes whose winners may be
    carried past the largest (or below the smallest) tuned value; none by default.  A
    family whose ``paired_evidence`` is ``None`` has no neighbourhood rule (the nearest
    key's winner serves): a data member switches it on, no code (``TritonFamily`` takes
    it as an argument)."""

    paired_evidence: PairedEvidence | None = PairedEvidence()
    transfers_past_range: Collection[str] = ()

    def choose_from_neighbours(self, asked: Mapping[str, KeyValue], neighbours: Iterable[Neighbour],
                               device: DeviceQuery) -> tuple[dict[str, KeyValue], str] | None:
        """The config :attr:`paired_evidence` chooses from the device's measurements at
        the tuned keys around ``asked`` (see :mod:`flyconfigs.kernels.paired_evidence`)."""
        if self.paired_evidence is None:
            return None
        return self.paired_evidence.choose(self, asked, neighbours, device, self.transfers_past_range)
