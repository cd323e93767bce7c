"""The family's neighbourhood rule in the nearest-key step: the tuned keys around the
asked one that a step offers a family's optional ``choose_from_neighbours``, and the
checked call.

Where the nearest-key step would serve a nearer key's winner (the *anchor*), the family
may choose another config from what the device measured around the asked key.  It is
offered the neighbours of that one step and that one standing only — the entries of the
anchor's standing in the step's order, measured on the anchor's device and labelled as
the anchor is (measured or predicted), none contested, each read when the family's
iteration reaches it and offered only when its artifact may serve its own key — so the
precedence rule is kept: a lower standing's measurements never decide what a higher one
serves.  Served means valid: the choice is served only when the registry's checks
(:meth:`~flyconfigs.registry.families.family.Family.check_config`) accept it for the asked key on the
asked device.  A rule that raises, answers anything but ``None`` or a (config, reason)
pair, or chooses a config the checks refuse, is reported once (``kernel-error``) and the
anchor's winner is served, as without the rule.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from flyconfigs.errors import FlyconfigsError
from flyconfigs.registry.checks.check import refusal
from flyconfigs.registry.core.axes import KeyValue
from flyconfigs.registry.families.family import Family
from flyconfigs.registry.families.offers import Neighbour, Timings, _Slot, config_token, lookup_of, slots_of
from flyconfigs.registry.search.records import Neighbourhood
from flyconfigs.registry.search.serving import Found
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.registry.sources.entries import Entry
from flyconfigs.schema.canonical import canonical_text

__all__ = ["FINAL_SAMPLES", "MEMBER", "Neighbour", "Offer", "Timings", "choose", "measurements", "said", "config_token",
           "timings_of"]

MEMBER = "choose_from_neighbours"


FINAL_SAMPLES = 15
"""The sample count of the tuner's final protocol (its screen takes 5): a timing of at
least this many samples is a final one where the artifact does not say its protocol's."""


def measurements(artifact: Any) -> list[tuple[Mapping[str, Any], float, bool]]:
    """``(config, median µs, final)`` of every candidate ``artifact`` timed (status
    ``ok``), in its order: the one place the neighbourhood reads an artifact's candidates.
    ``final`` tells the tuner's full protocol from its screen by the timing's sample
    count: the protocol's own count where the artifact records it, else
    :data:`FINAL_SAMPLES`."""
    from flyconfigs.schema.pack import candidates_of

    protocol = getattr(artifact.provenance, "timing_protocol", None)
    full = protocol.samples if protocol is not None else FINAL_SAMPLES
    # The label the data carry where they carry one (a pack's measurements: screen, final
    # or unknown); an unknown one by its sample count, for this comparison only.
    return [(c.config, float(c.timing.median_us),
             c.label == "final" if c.label in ("final", "screen") else c.timing.samples >= full)
            for c in candidates_of(artifact) if c.status == "ok" and c.timing is not None]


def timings_of(artifact: Any) -> Timings:
    """``(config, median µs)`` of every candidate ``artifact`` timed, fastest first
    (read-only configs); empty for a predicted artifact, which timed nothing."""
    return _fastest_first((config, median) for config, median, _ in measurements(artifact))


def _fastest_first(timed: Iterable[tuple[Mapping[str, Any], float]]) -> Timings:
    ordered = sorted(timed, key=lambda item: item[1])
    return tuple((MappingProxyType(dict(config)), median) for config, median in ordered)


_Timed = tuple[Timings, tuple[_Slot, ...], Mapping[_Slot, float], frozenset[_Slot]]
_TIMED: dict[int, tuple[weakref.ref[Any], str, _Timed]] = {}
"""By artifact, while it lives: its timings, their tokens and lookup for one family's
tunable defaults, made once (resolves off the grid read the same neighbours again and
again)."""


def _timed(artifact: Any, defaults: Mapping[str, KeyValue]) -> _Timed:
    token = canonical_text(dict(defaults))
    ident = id(artifact)
    hit = _TIMED.get(ident)
    if hit is not None and hit[0]() is artifact and hit[1] == token:
        return hit[2]
    # One read of the candidates for all of them (a pack row decodes them on each read).
    measured = measurements(artifact)
    timings = _fastest_first((config, median) for config, median, _ in measured)
    slots = slots_of(timings, defaults)
    timed = (timings, slots, lookup_of(slots, timings),
             frozenset(config_token(config, defaults) for config, _, final in measured if final))
    _TIMED[ident] = (weakref.ref(artifact, lambda _: _TIMED.pop(ident, None)), token, timed)
    return timed


class Offer:
    """The neighbours one nearest-key step offers around ``anchor``, nearest first, each
    read when an iteration reaches it; :attr:`seen` keeps those handed out (the record
    names them).  ``ranked`` is the step's (entry, distance) list in its order and
    ``contested`` says whether an entry's slot is contested (never served, so never
    offered)."""

    def __init__(self, family: Family, key: Mapping[str, KeyValue], query: DeviceQuery, anchor: Found,
                 ranked: list[tuple[Entry, tuple[float, ...]]], contested: Callable[[Entry], bool]) -> None:
        self.family, self.key, self.query, self.anchor = family, key, query, anchor
        self.ranked, self.contested, self.problems = ranked, contested, family.problems
        self.seen: list[Neighbour] = []

    def __iter__(self) -> Iterator[Neighbour]:
        anchor = self.anchor.entry
        tier, predicted = anchor.source.tier, self.anchor.predicted
        keys: set[str] = set()
        for entry, distance in self.ranked:
            if entry.source.tier != tier or entry.device != anchor.device:
                continue
            slot = canonical_text(entry.key)
            # One key once: a second artifact of it (a lower-ranked source of the same
            # standing, or a duplicate in a folder) is what the step would not serve.
            if slot in keys or self.contested(entry) or entry.predicted(self.problems) != predicted:
                continue
            artifact = entry.load(self.problems)
            if artifact is None or refusal(self.family.kernel, artifact, entry.key, self.query) is not None:
                continue
            keys.add(slot)
            defaults = self.family.decl.tunable_defaults
            timings, slots, lookup, finals = _timed(artifact, defaults)
            neighbour = Neighbour(MappingProxyType(dict(entry.key)), distance,
                                  MappingProxyType(dict(artifact.winner.config)), timings, str(entry.path),
                                  lookup, defaults, finals,
                                  None if artifact.default is None else MappingProxyType(dict(artifact.default.config)),
                                  slots)
            self.seen.append(neighbour)
            yield neighbour


def choose(offer: Offer) -> Found | None:
    """What the family's ``choose_from_neighbours`` serves instead of ``offer``'s anchor,
    with the record of where it came from, or ``None`` (serve the anchor's winner): the
    family said nothing, failed, or chose a config the registry's checks refuse (both
    reported once)."""
    family, key, query = offer.family, offer.key, offer.query
    decl = family.decl
    answer = family.choose(key, offer, query)
    if answer is None:
        return None
    config, reason = answer
    why = family.check_config(config, key, query)
    if why is not None:
        family.fault(MEMBER, f"chose {config} for {dict(key)}, which the checks refuse: {why}",
                     "the nearest key's winner is served instead", slot=f"{MEMBER}:refused")
        return None
    defaults = decl.tunable_defaults
    target = config_token(config, defaults)
    timed_at = tuple(n.key for n in offer.seen if n.time_of(config) is not None)
    return replace(offer.anchor, config=config, adapted_from=None, neighbourhood=Neighbourhood(
        reason=reason,
        neighbours=tuple(n.key for n in offer.seen),
        timed_at=timed_at,
        winner_at=tuple(n.key for n in offer.seen if config_token(n.winner, defaults) == target),
        # Asked only of a config no neighbour timed: the family's default may cost a search
        # of its space, and a timed config is already named by where it was timed.
        default=not timed_at and _is_default(offer, target),
    ))


def said(kernel: str, found: Found) -> str:
    """What the record's reasons and ``explain`` say of a config ``kernel``'s
    neighbourhood rule chose (``found`` made by :func:`choose`)."""
    hood = found.neighbourhood
    assert hood is not None
    return f"{kernel}'s neighbourhood rule chose {found.config}: {hood.reason} ({hood.describe()})"


def _is_default(offer: Offer, target: _Slot) -> bool:
    family = offer.family
    try:
        return config_token(family.default(offer.key, offer.query), family.decl.tunable_defaults) == target
    except FlyconfigsError:  # a default that fails is reported where it is served; here it is only not this one
        return False
