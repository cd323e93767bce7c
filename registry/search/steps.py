"""The precedence rule in code: one search for a kernel at a key on a device over one
catalog index.  ``resolve``, ``explain``, ``doctor`` and ``validate`` all call
:func:`search`, so they cannot disagree.  It walks the steps and, within each, the
candidates in :func:`~flyconfigs.registry.search.preference.rank_key` order, applying the filters
that docstring lists; a config is served only when
:func:`~flyconfigs.registry.checks.check.refusal` accepts it.  A nearer key's winner that does
not fit the asked key is adapted by the family's ``adapt_config`` and served if the check
accepts the result (the record's ``adapted_from`` keeps the winner as tuned); a family's
``choose_from_neighbours`` may choose another config from the timings of that step and
standing (:mod:`flyconfigs.registry.search.neighbourhood`).  Passing over such a key is routine
(one DEBUG line per resolve); a missing, corrupt, mismatched or invalid artifact, or a
winner its kernel refuses for the artifact's own key, is skipped with one warning per cause.
Every reason is kept in the record.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from flyconfigs.errors import KernelPluginError
from flyconfigs.registry.core.axes import KeyValue
from flyconfigs.registry.core.problems import Problem
from flyconfigs.registry.families.family import Family
from flyconfigs.registry.search.candidate import Judge
from flyconfigs.registry.search.catalog import Index
from flyconfigs.registry.search.matching import exact_matches, nearest_ranked
from flyconfigs.registry.search.neighbourhood import Offer, choose, said
from flyconfigs.registry.search.records import LAYER_NAMES, Resolution, Step
from flyconfigs.registry.search.serving import ROUTINE, Found, changes, how, selection_of
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.registry.sources.entries import PACKAGES_ENV, Entry
from flyconfigs.schema.canonical import canonical_text

__all__ = ["search", "serve_default"]

logger = logging.getLogger("flyconfigs.registry")

PLAN = ((0, "exact"), (1, "exact"), (0, "nearest"), (1, "nearest"), (2, "exact"), (2, "nearest"))
"""The steps, most specific first: (device layer, key match)."""
_EXACT_ONLY = "is served configs of its exact device only"
OWN_DEVICE_PLAN = ((0, "exact"), (0, "nearest"), (1, "exact"), (1, "nearest"), (2, "exact"), (2, "nearest"))
"""The steps of a family whose ``own_device_first`` is true: the device's own keys first."""


def search(family: Family, key: dict[str, KeyValue], query: DeviceQuery, index: Index,
           trace: list[Step]) -> Resolution:
    """What ``family`` serves at ``key`` on ``query`` from ``index``: the first usable
    artifact in the precedence order, else the family's default; every step taken is
    appended to ``trace``, every problem met reported to the family's log."""
    run = _Search(index, family, key, query, trace)
    hit = run.run()
    run.log_passed_over()
    if hit is None:
        return serve_default(family, key, query, [*run.reasons, f"no artifact for {family.name} on {query.describe()}"])
    found, layer, mode = hit
    entry, artifact = found.entry, found.artifact
    return Resolution(
        kernel=family.name, key=_frozen(key), device=query,
        config=_frozen(found.config), source=entry.source.kind, layer=LAYER_NAMES[layer],
        key_match=mode,  # type: ignore[arg-type]
        borrowed=layer == 2, matched_key=_frozen(entry.key), matched_device=entry.device,
        origin=entry.source.name, version=entry.source.version, file=str(entry.path), reasons=tuple(run.reasons),
        selection=selection_of(artifact),
        adapted_from=None if found.adapted_from is None else _frozen(found.adapted_from),
        neighbourhood=found.neighbourhood,
    )


def serve_default(family: Family, key: dict[str, KeyValue], query: DeviceQuery | None,
                  reasons: list[str]) -> Resolution:
    """The family's default for ``key``, checked like any served config (its tunables
    and its own ``check_config``): one it refuses is reported once and raised as
    :class:`~flyconfigs.errors.KernelPluginError`, as a default that raises is.  An empty
    default (a family without a heuristic: the caller keeps its own) is not checked."""
    config = family.default(key, query)
    # An empty default is a family's way of saying it has no heuristic (the caller keeps
    # its own choice, as the vLLM and aiter families do): there is nothing to check.
    why = family.check_config(config, key, query) if config else None
    if why is not None:
        family.problems.report(Problem("kernel-error", family.where, f"default_config returned a config its own checks "
                                       f"refuse for {dict(key)}: {why}", family.distribution))
        raise KernelPluginError(family.name, family.where, "default_config",
                                f"returned a config its own checks refuse ({why}); no artifact serves this call, so "
                                f"there is no config")
    return Resolution(kernel=family.name, key=_frozen(key), device=query, config=_frozen(config),
                      source="default", layer="default", key_match="none",
                      reasons=(*reasons, "served the kernel's default heuristic"))


def _frozen(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy sharing nothing with the catalog or the caller: a list or object
    in a config or key is copied, so mutating what the record holds cannot change what
    later calls serve."""
    return MappingProxyType({k: _deep(v) for k, v in value.items()})


def _deep(value: Any) -> Any:
    if isinstance(value, list):
        return [_deep(v) for v in value]
    if isinstance(value, dict):
        return {k: _deep(v) for k, v in value.items()}
    return value


class _Search:
    """One search: the entries it has tried, the reasons it keeps for the record and the
    steps it appends to ``trace``."""

    def __init__(self, index: Index, family: Family, key: dict[str, KeyValue], query: DeviceQuery,
                 trace: list[Step]) -> None:
        self.problems, self.index, self.family, self.decl = family.problems, index, family, family.decl
        self.key, self.query, self.trace = key, query, trace
        self.tokens = query.layers()
        # FlyDSL's identity (``device_match`` "product"): the asked product's artifacts only.
        self.product_only = family.device_match == "product"
        self.tried: set[int] = set()
        self.reasons: list[str] = []
        self.judge = Judge(family, key, query)

    def run(self) -> tuple[Found, int, str] | None:
        """What the search serves and the layer and key match it was found at, or ``None``."""
        plan = OWN_DEVICE_PLAN if self.family.own_device_first else PLAN
        for layer, mode in plan:
            what = f"{LAYER_NAMES[layer]} device, {mode} key"
            found = self.step(layer, mode)
            if found is None:
                continue
            if found.predicted and layer == 0:
                # Measured beats predicted: a measurement on a device of the same arch and
                # compute units (the same silicon, e.g. an MI325X for an MI300X) outranks a
                # prediction made for this one, from a source of the same standing or a
                # higher one.  A borrowed same-arch measurement does not.
                better = self.step(1, mode, measured_only=True, within=found.entry.source.tier)
                if better is not None:
                    self._say(what, f"{found.entry.path}: predicted, not served: {better.entry.path} was measured "
                                    f"on {better.entry.device.describe()}, of the same arch and compute units")
                    found, layer = better, 1
            entry, artifact = found.entry, found.artifact
            adapted = "" if found.adapted_from is None else (
                f"; its winner adapted to this key by {self.decl.name}: {changes(found.adapted_from, found.config)}")
            if found.neighbourhood is not None:
                adapted = f"; {said(self.decl.name, found)}"
            relaxed = self._relaxed(found.entry.key)
            if relaxed:
                self.reasons.append(relaxed)
                adapted += f"; {relaxed}"
            if mode == "exact" and self.trace and entry.source.tier > 0:
                self._higher_had_nearer(found, layer)
            self.trace.append(Step(f"{LAYER_NAMES[layer]} device, {mode} key",
                                   f"found {entry.path} ({entry.source.describe()})"
                                   + ("" if artifact.selection.measured else f", {how(artifact)}") + adapted))
            return found, layer, mode
        return None

    def _relaxed(self, tuned: Mapping[str, KeyValue]) -> str:
        """What a nearer key's match says of the exact axes it differs on (the family's
        ``relaxed_axes``): never an exact match, and where it was tuned; ``""`` for none."""
        differ = [a.name for a in self.decl.key_axes if not a.ordinal and a.name in tuned
                  and canonical_text(tuned[a.name]) != canonical_text(self.key.get(a.name))]
        if not differ:
            return ""
        said = ", ".join(f"{n}={tuned[n]} (asked {self.key.get(n)})" for n in differ)
        return f"no tuned key has the asked {', '.join(differ)}: {self.decl.name}'s lookup relaxed it and serves {said}"

    def log_passed_over(self) -> None:
        """One DEBUG line for the tuned keys this search passed over because their winners
        do not fit the asked key: routine away from the tuned grid, not a problem."""
        routine = [r for r in self.reasons if ROUTINE in r]
        if routine:
            logger.debug("%s %s on %s: %d nearer tuned key(s) passed over; first: %s", self.decl.name,
                         dict(self.key), self.query.describe(), len(routine), routine[0])

    def _say(self, what: str, reason: str) -> None:
        self.reasons.append(reason)
        self.trace.append(Step(what, reason))

    def step(self, layer: int, mode: str, measured_only: bool = False, within: int | None = None) -> Found | None:
        """What one step serves: the first usable candidate in
        :func:`~flyconfigs.registry.search.preference.rank_key` order, measured before predicted
        within a tier (none predicted when ``measured_only``); ``within`` admits that tier
        or better only.  A contested entry is never served."""
        token = self.tokens[layer]
        what = f"{LAYER_NAMES[layer]} device, {mode} key"
        if token is None:
            self.trace.append(Step(what, "skipped: the device's identity is incomplete"))
            return None
        if self.product_only and layer == 2:
            if not measured_only:
                self.trace.append(Step(what, f"skipped: {self.decl.name} {_EXACT_ONLY}"))
            return None
        pool = self.index.pool(layer, token, self.query.product)
        ranked = ([(e, ()) for e in exact_matches(pool, self.key)] if mode == "exact"
                  else nearest_ranked(pool, self.key, self.family))
        ranked = [(e, d) for e, d in ranked if id(e) not in self.tried]
        others = 0
        if self.product_only:
            own = (self.query.product, self.query.compute_units)
            exact = [(e, d) for e, d in ranked if (e.device.product, e.device.compute_units) == own]
            others, ranked = len(ranked) - len(exact), exact
        if not ranked:
            if not measured_only:
                passed = f"; {others} of other products passed over: {self.decl.name} {_EXACT_ONLY}" if others else ""
                self.trace.append(Step(what, "no artifact" + passed))
            return None
        predicted: Found | None = None
        for entry, distance in ranked:
            tier = entry.source.tier
            if within is not None and tier > within:
                continue
            if predicted is not None and tier > predicted.entry.source.tier:
                break  # a label a source wrote never lifts it above a source of a better standing
            rivals = sorted(self.index.claimants(layer, token, entry) - {entry.source.name})
            if rivals:
                self.tried.add(id(entry))
                self._say(what, f"{entry.path}: contested: {', '.join(rivals)} also claim this key at the same "
                                f"precedence ({entry.source.describe()}); neither is served until {PACKAGES_ENV} "
                                f"ranks them")
                continue
            if entry.predicted(self.problems):
                if predicted is None and not measured_only:
                    predicted = self._usable(entry, what, distance)
                continue
            found = self._usable(entry, what, distance)
            if found is not None:
                self._lower_was_nearer(found, ranked, what)
                return self._around(found, ranked, layer, token, what)
        if predicted is not None:
            self._lower_was_nearer(predicted, ranked, what)
            return self._around(predicted, ranked, layer, token, what)
        return predicted

    def _around(self, found: Found, ranked: list[tuple[Entry, tuple[float, ...]]], layer: int,
                token: tuple[object, ...], what: str) -> Found:
        """``found``, or at a nearer key the config the family's neighbourhood rule
        chooses from the neighbours of this step and ``found``'s standing
        (:mod:`flyconfigs.registry.search.neighbourhood`), with why."""
        if self.judge.asked(found.entry):
            return found

        def contested(entry: Entry) -> bool:
            return bool(self.index.claimants(layer, token, entry) - {entry.source.name})

        chosen = choose(Offer(self.family, self.key, self.query, found, ranked, contested))
        if chosen is None or chosen.neighbourhood is None:
            return found
        # Kept in the record's reasons; explain prints it on the step's "found" line.
        self.reasons.append(said(self.decl.name, chosen))
        return chosen

    def _higher_had_nearer(self, found: Found, layer: int) -> None:
        """For ``explain`` (a search given a trace to fill): say when a source of a higher
        standing than the exact key served had a nearer key on the same device layers
        (the steps come before standing: an exact measurement of the asked key is served
        before any nearest key).  Only asked while explaining: it weighs the nearest-key
        step's neighbours, which a resolve never needs once an exact key serves."""
        tier = found.entry.source.tier
        for near_layer in range(layer + 1):
            token = self.tokens[near_layer]
            if token is None:
                continue
            pool = self.index.pool(near_layer, token, self.query.product)
            nearer = next((e for e, _ in nearest_ranked(pool, self.key, self.family)
                           if e.source.tier < tier and not self.judge.asked(e)), None)
            if nearer is not None:
                self.trace.append(Step(f"{LAYER_NAMES[layer]} device, exact key",
                                       f"{nearer.path} ({nearer.source.describe()}) has a nearer key "
                                       f"{dict(nearer.key)} at a higher standing, but an exact key of any standing "
                                       f"is served before a nearest one (a measurement of the asked key beats a guess)"))
                return

    def _lower_was_nearer(self, found: Found, ranked: list[tuple[Entry, tuple[float, ...]]], what: str) -> None:
        """Say when a source of a lower standing had a nearer key than the one served."""
        if self.judge.asked(found.entry):
            return
        tier = found.entry.source.tier
        nearer = next((e for e, d in ranked if e.source.tier > tier and d < found.distance), None)
        if nearer is not None:
            self._say(what, f"{nearer.path} ({nearer.source.describe()}) has a nearer key {dict(nearer.key)}, but "
                            f"{found.entry.source.describe()} ranks above it: within a step standing comes first")

    def _usable(self, entry: Entry, what: str, distance: tuple[float, ...]) -> Found | None:
        self.tried.add(id(entry))
        found = self.judge.usable(entry, distance)
        if isinstance(found, Found):
            return found
        self._say(what, found)
        return None
