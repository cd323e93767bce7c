"""Resolution: which config a kernel gets for a key on a device, and why.

Precedence (the one place it is written down; the README repeats it):

1. the in-process memo (a dictionary lookup; negative results are memoized too);
2. for the device's layers from most to least specific —

   a. the same product (vendor, arch, product, compute units, features), exact key;
   b. the same arch and compute-unit count, exact key;
   c. layers a and b with the nearest key on the kernel's ordinal axes (``M``), never
      across exact axes (``dtype``);
   d. the same arch only (*borrowed*: the record names the device it came from), exact
      key, then the nearest key;

   and within each step the sources by precedence (below), a nearer key before a
   nearer product.  A kernel whose ``device_match`` is ``product`` (FlyDSL's identity)
   is served only artifacts of the asked product, arch and compute units: the other
   products of steps b and c, and step d, are passed over;
3. the kernel's default heuristic.

Precedence between sources, for one kernel family (``flyconfigs explain`` prints it):

- ``FLYCONFIGS_PATH`` directories, in the order listed;
- the data packages ``FLYCONFIGS_PACKAGES`` lists, in its order;
- the family **owner's** packages: the distribution that declares the family through
  the ``flyconfigs.kernels`` entry point, and the data packages its declaration names
  (``data_packages``);
- the **official** package of the target, ``flyconfigs-<target>``;
- every other (**third-party**) package.

Only the user's settings and the family's own declaration move a source: never its name
(no alphabetical order) nor a label its artifacts carry.  Within one of these standings
a measured artifact goes before a predicted one, then the user's order; a measured
artifact of a lower standing never outranks a higher one's prediction.  When several
sources hold an artifact for the same family, device and key, the best ranked serves and
the collision is reported (``flyconfigs doctor``, which fails on one nobody chose:
between packages ``FLYCONFIGS_PACKAGES`` does not both rank); two packages of one standing
(two third parties, say) **contest** the slot, and neither serves it until the user
ranks them in ``FLYCONFIGS_PACKAGES``.

Nearest key: the smallest sum over ordinal axes of ``|log2 a - log2 b|``; a tie goes to
the larger tuned value.  A config is served only when its artifact is bound to the
installed family (:func:`~flyconfigs.registry.binding.binding_problem`: its family
version and source), the config is one of the declared tunables and the kernel's own
``check_config`` accepts it for the asked key and device, and never from an artifact a
test double made to a real device.  A nearer key's winner that does not fit the asked key (a vector
width that does not divide the row, say) is adapted by the kernel's optional
``adapt_config(config, key, device)`` and served if the check accepts the result (the
record's ``adapted_from`` keeps the winner as tuned); else the next nearest key is
tried.  Passing over such a key is routine (one DEBUG line per resolve, the reasons in
the record); a missing, corrupt, mismatched or invalid artifact, or a winner its kernel
refuses for the artifact's own key, is skipped with one warning per cause and the
search goes on; the reasons are kept in the record.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from importlib import invalidate_caches
from types import MappingProxyType
from typing import Any, Literal

from flyconfigs.errors import ArtifactError, FlyconfigsError
from flyconfigs.registry.catalog import Catalog
from flyconfigs.registry.check import check_winner, refusal
from flyconfigs.registry.declarations import (
    KernelDecl,
    KeyValue,
    check_config,
    check_key,
    default_config,
    forget_loaded,
    kernel_declaration,
    kernel_name,
)
from flyconfigs.registry.device import (
    DEVICE_ENV,
    Detector,
    DeviceQuery,
    as_query,
    chosen_detector,
    detect_with,
    installed_detector,
    parse_device_spec,
)
from flyconfigs.registry.matching import exact_matches, find_collisions, nearest_matches
from flyconfigs.registry.ownership import Owner, owner_of
from flyconfigs.registry.problems import Problem, ProblemLog
from flyconfigs.registry.records import LAYER_NAMES, Collision, Resolution, Step
from flyconfigs.registry.sources import PACKAGES_ENV, Entry, PackageInfo, Source
from flyconfigs.schema.canonical import canonical_text
from flyconfigs.schema.models import DeviceIdentity

__all__ = ["MEMO_LIMIT", "Collision", "Resolution", "Resolver", "Step"]

logger = logging.getLogger("flyconfigs.registry")

MEMO_LIMIT = 16384
"""Memoized resolutions kept per resolver; the oldest is dropped first beyond it."""

Observer = Callable[[Resolution], None]


class Resolver:
    """Answers :meth:`resolve`; holds the memo, the source index and the problem log.

    Thread-safe; one process-wide instance backs :func:`flyconfigs.resolve`.
    """

    _UNSET: Any = object()

    def __init__(self, paths: list[str] | None = None, detector: Detector | None = _UNSET) -> None:
        """``paths`` replaces ``FLYCONFIGS_PATH``; ``detector`` reports the current GPU
        (default: the one installed through the entry-point group
        ``flyconfigs.detectors``, looked up when first needed; ``None``: never detect)."""
        self._paths = paths
        self._detector = detector
        self._detector_installed = detector is Resolver._UNSET
        self._lock = threading.RLock()
        self._memo: dict[tuple[object, ...], Resolution] = {}
        self.problems = ProblemLog()
        self._catalog = Catalog(paths, self.problems)
        self._device: tuple[DeviceQuery | None, str] | None = None
        self._observers: list[Observer] = []
        self.generation = 0
        """Incremented by :meth:`refresh`; callers that cache resolutions compare it."""

    # -- caches -------------------------------------------------------------------------

    def refresh(self) -> None:
        """Drop every cache: the memo, the source index, the detected device (and the
        installed detector chosen) and the record of problems already logged.  Packages
        installed or removed since are seen by the next resolve, and problems that
        remain are logged once more."""
        with self._lock:
            invalidate_caches()
            forget_loaded()
            self._memo.clear()
            self._device = None
            if self._detector_installed:  # the detectors installed, or FLYCONFIGS_DETECTOR, may have changed
                self._detector = Resolver._UNSET
            self.problems = ProblemLog()
            self._catalog = Catalog(self._paths, self.problems)
            self.generation += 1

    def add_observer(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer`` with every resolution (memo hits too); returns a remover.
        An observer that raises is logged once and never breaks a resolve."""
        with self._lock:
            self._observers = [*self._observers, observer]

        def remove() -> None:
            with self._lock:
                self._observers = [o for o in self._observers if o is not observer]

        return remove

    # -- the hot path -------------------------------------------------------------------

    def resolve(
        self,
        kernel: str | KernelDecl,
        key: Mapping[str, object],
        device: DeviceIdentity | DeviceQuery | str | None = None,
    ) -> Resolution:
        """The config for ``kernel`` at ``key`` on ``device`` (default: the current
        device) and its provenance.  Never raises for bad data; raises
        :class:`~flyconfigs.errors.UnknownKernelError`,
        :class:`~flyconfigs.errors.InvalidKeyError` or
        :class:`~flyconfigs.errors.InvalidDeviceError` for a bad call.  A kernel
        plugin whose ``check_key`` raises is reported once and the key checked against
        its declared axes; one whose ``name`` raises, or whose ``default_config`` raises
        when no artifact serves the call, raises
        :class:`~flyconfigs.errors.KernelPluginError` naming its distribution (there is
        no config to serve)."""
        memo_key: tuple[object, ...] | None
        try:
            name = kernel if isinstance(kernel, str) else kernel_name(kernel)
            # Typed and order-free: ``M=True`` or ``M=1.0`` never hits the entry of ``M=1``.
            # A declaration passed in says its own device rule (two of one name may differ).
            rule = None if isinstance(kernel, str) else getattr(kernel, "device_match", None)
            memo_key = (name, rule, _memo_device(device), *[(k, v.__class__, v) for k, v in sorted(key.items())])
            hit = self._memo.get(memo_key)
        except TypeError:  # a list or object value: its canonical JSON is the typed form
            try:
                memo_key = (name, rule, _memo_device(device), canonical_text(dict(key)))
                hit = self._memo.get(memo_key)
            except (TypeError, ValueError, AttributeError):
                hit = memo_key = None
        except (AttributeError, FlyconfigsError):  # not a mapping, or a broken declaration: the slow path names it
            hit = memo_key = None
        if hit is None:
            generation = self.generation
            hit = self._resolve_slow(kernel, key, device)
            if memo_key is not None:
                with self._lock:
                    if self.generation == generation:  # a refresh() since makes the answer stale
                        if len(self._memo) >= MEMO_LIMIT:
                            self._memo.pop(next(iter(self._memo)))
                        self._memo[memo_key] = hit
        if self._observers:
            self._notify(hit)
        return hit

    def _notify(self, resolution: Resolution) -> None:
        for observer in self._observers:
            try:
                observer(resolution)
            except Exception as exc:  # noqa: BLE001 - an observer must not break serving
                self.problems.report(
                    Problem("observer-error", repr(observer), f"raised {type(exc).__name__}: {exc}; resolve went on")
                )

    # -- the slow path ------------------------------------------------------------------

    def _resolve_slow(self, kernel: object, key: object, device: object) -> Resolution:
        decl = kernel_declaration(kernel, self.problems)
        norm = check_key(decl, key, self.problems)
        query, why = self._device_query(device)
        with self._lock:
            return self._search(decl, norm, query, why, [])

    def current_device(self) -> tuple[DeviceQuery | None, str]:
        """The device resolve uses when none is given, and how it was found."""
        return self._device_query(None)

    def _device_query(self, device: object) -> tuple[DeviceQuery | None, str]:
        if device is not None:
            return as_query(device), "given by the caller"  # type: ignore[arg-type]
        with self._lock:
            if self._device is None:
                self._device = self._detect()
            return self._device

    def _detect(self) -> tuple[DeviceQuery | None, str]:
        spec = os.environ.get(DEVICE_ENV)
        if spec:
            try:
                return parse_device_spec(spec, DEVICE_ENV), f"from {DEVICE_ENV}"
            except ArtifactError as exc:
                self.problems.report(Problem("bad-device", DEVICE_ENV, "; ".join(map(str, exc.problems))))
                return None, f"{DEVICE_ENV} is invalid ({exc.problems[0]})"
        if self._detector is Resolver._UNSET:
            self._detector = installed_detector(self.problems)
        return detect_with(self._detector, self.problems)

    def _search(
        self, decl: KernelDecl, key: dict[str, KeyValue], query: DeviceQuery | None, why: str, trace: list[Step]
    ) -> Resolution:
        if query is None:
            trace.append(Step("the current device", f"no device known: {why}"))
            return self._default(decl, key, None, [f"no device known: {why}"])
        search = _Search(self.problems, self._catalog.index(owner_of(decl, decl.name), query.arch), decl, key, query,
                         trace)
        hit = search.run()
        search.log_passed_over()
        if hit is None:
            return self._default(decl, key, query, [*search.reasons, f"no artifact for {decl.name} on {query.describe()}"])
        found, layer, mode = hit
        entry, artifact = found.entry, found.artifact
        return Resolution(
            kernel=decl.name,
            key=MappingProxyType(dict(key)),
            device=query,
            config=MappingProxyType(dict(found.config)),
            source=entry.source.kind,
            layer=LAYER_NAMES[layer],
            key_match=mode,  # type: ignore[arg-type]
            borrowed=layer == 2,
            matched_key=MappingProxyType(dict(entry.key)),
            matched_device=entry.device,
            origin=entry.source.name,
            version=entry.source.version,
            file=str(entry.path),
            reasons=tuple(search.reasons),
            selection=_selection(artifact),
            adapted_from=None if found.adapted_from is None else MappingProxyType(dict(found.adapted_from)),
        )

    def _default(
        self, decl: KernelDecl, key: dict[str, KeyValue], query: DeviceQuery | None, reasons: list[str]
    ) -> Resolution:
        config = default_config(decl, key, query, self.problems)
        return Resolution(
            kernel=decl.name,
            key=MappingProxyType(dict(key)),
            device=query,
            config=MappingProxyType(dict(config)),
            source="default",
            layer="default",
            key_match="none",
            reasons=(*reasons, "served the kernel's default heuristic"),
        )

    # -- explain ------------------------------------------------------------------------

    def explain(
        self, kernel: str | KernelDecl, key: Mapping[str, object], device: DeviceIdentity | DeviceQuery | str | None = None
    ) -> tuple[Resolution, list[Step]]:
        """Resolve without the memo and return every step taken, in order."""
        decl = kernel_declaration(kernel, self.problems)
        norm = check_key(decl, key, self.problems)
        query, why = self._device_query(device)
        trace = [Step("device", f"{query.describe() if query else 'unknown'} ({why})")]
        owner = owner_of(decl, decl.name)
        with self._lock:
            if query is not None:
                order = self._catalog.sources_for(query.arch, owner)
                if owner.packages or any(s.standing == "owner" for s in order):
                    # Said where the owner's packages rank apart; otherwise each source's
                    # standing already says all there is.
                    trace.append(Step(f"owner of {decl.name}", owner.describe()))
                trace.append(Step("sources, in precedence order", "; ".join(s.describe() for s in order) or "none"))
            return self._search(decl, norm, query, why, trace), trace

    def sources_for(self, arch: str) -> list[Source]:
        """The sources that can serve ``arch``, in precedence order."""
        with self._lock:
            return self._catalog.sources_for(arch)

    # -- what doctor and list read -------------------------------------------------------

    def packages(self) -> list[PackageInfo]:
        """Installed data packages whose manifests are readable, in precedence order
        (reads every manifest)."""
        with self._lock:
            return self._catalog.packages()

    def all_entries(self) -> Iterator[Entry]:
        """Every entry of every source, each ranked for its kernel's owner, in
        precedence order (reads every manifest)."""
        with self._lock:
            entries = self._catalog.all_entries(self._owner)
        yield from entries

    def _owner(self, kernel: str) -> Owner:
        try:
            decl: KernelDecl | None = kernel_declaration(kernel, self.problems)
        except FlyconfigsError:  # a kernel this environment does not declare has no owner
            decl = None
        return owner_of(decl, kernel)

    def collisions(self) -> list[Collision]:
        """Every collision between sources, each also logged once."""
        return find_collisions(list(self.all_entries()), self.problems)

    def check_all(self) -> list[Problem]:
        """Load every artifact, check each winner with its kernel's declaration (when
        this environment declares the kernel) and find every collision, as doctor does;
        return every problem seen so far."""
        if self._detector_installed:
            chosen_detector(self.problems)  # reports detectors of other distributions competing with ours
        for entry in self.all_entries():
            artifact = entry.load(self.problems)
            if artifact is None:
                continue
            dist = entry.source.name if entry.source.kind == "package" else None
            check_winner(artifact, str(entry.path), self.problems, dist)
        self.collisions()
        return self.problems.problems()




def _memo_device(device: object) -> object:
    """``device`` as a hashable memo token that equals another exactly when both resolve
    alike: an identity (a pydantic model holding a list, so unhashable) becomes the query
    resolution makes of it, a query's features a tuple; a spec string stays itself."""
    if isinstance(device, DeviceIdentity):
        return DeviceQuery.of(device)
    if isinstance(device, DeviceQuery) and isinstance(device.features, list):
        return replace(device, features=tuple(device.features))
    return device


class _Search:
    """One search for a kernel at a key on a device over one catalog index, in the
    precedence of the module's docstring: the entries it has tried, the reasons it keeps
    for the record and the steps it appends to ``trace``."""

    PLAN = ((0, "exact"), (1, "exact"), (0, "nearest"), (1, "nearest"), (2, "exact"), (2, "nearest"))

    def __init__(self, problems: ProblemLog, index: Any, decl: KernelDecl, key: dict[str, KeyValue],
                 query: DeviceQuery, trace: list[Step]) -> None:
        self.problems = problems
        self.index = index
        self.decl = decl
        self.key = key
        self.query = query
        self.trace = trace
        self.tokens = query.layers()
        self.product_only = decl.device_match == "product"
        self.tried: set[int] = set()
        self.reasons: list[str] = []

    def run(self) -> tuple[_Found, int, str] | None:
        """What the search serves and the layer and key match it was found at, or ``None``."""
        for layer, mode in self.PLAN:
            what = f"{LAYER_NAMES[layer]} device, {mode} key"
            found = self.step(layer, mode)
            if found is None:
                continue
            if found.artifact.selection.rule == "predicted" and layer == 0:
                # Measured beats predicted: a measurement on a device of the same arch and
                # compute units (the same silicon, e.g. an MI325X for an MI300X) outranks a
                # prediction made for this one, from a source of the same standing or a
                # higher one.  A borrowed same-arch measurement does not.
                better = self.step(1, mode, measured_only=True, within=found.entry.source.rank[0])
                if better is not None:
                    self.reasons.append(f"{found.entry.path}: predicted, not served: {better.entry.path} was measured "
                                        f"on {better.entry.device.describe()}, of the same arch and compute units")
                    self.trace.append(Step(what, self.reasons[-1]))
                    found, layer = better, 1
            entry, artifact = found.entry, found.artifact
            adapted = "" if found.adapted_from is None else (
                f"; its winner adapted to this key by {self.decl.name}: {_changes(found.adapted_from, found.config)}")
            self.trace.append(Step(f"{LAYER_NAMES[layer]} device, {mode} key",
                                   f"found {entry.path} ({entry.source.describe()})"
                                   + ("" if artifact.selection.measured else f", {_how(artifact)}") + adapted))
            return found, layer, mode
        return None

    def log_passed_over(self) -> None:
        """One DEBUG line for the tuned keys this search passed over because their winners
        do not fit the asked key: routine away from the tuned grid, not a problem."""
        routine = [r for r in self.reasons if _ROUTINE in r]
        if routine:
            logger.debug("%s %s on %s: %d nearer tuned key(s) passed over; first: %s", self.decl.name,
                         dict(self.key), self.query.describe(), len(routine), routine[0])

    def step(self, layer: int, mode: str, measured_only: bool = False, within: int | None = None) -> _Found | None:
        """The usable artifact one step of the search finds: the first measured one in
        match order unless a predicted one of a better standing came first, else (unless
        ``measured_only``: measured ones of standing tier ``within`` or better only) the
        first predicted one.  A contested entry is never served."""
        token = self.tokens[layer]
        what = f"{LAYER_NAMES[layer]} device, {mode} key"
        if token is None:
            self.trace.append(Step(what, "skipped: the device's identity is incomplete"))
            return None
        if self.product_only and layer == 2:
            if not measured_only:
                self.trace.append(Step(what, f"skipped: {self.decl.name} is served configs of its exact device only"))
            return None
        index, key = self.index, self.key
        pool = index.by_layer[layer].get(token, []) if layer == 0 else index.for_product(layer, token, self.query.product)
        matches = exact_matches(pool, key) if mode == "exact" else nearest_matches(pool, key, self.decl)
        matches = [e for e in matches if id(e) not in self.tried]
        others = 0
        if self.product_only:
            query = self.query
            exact = [e for e in matches if (e.device.product, e.device.compute_units) == (query.product,
                                                                                        query.compute_units)]
            others, matches = len(matches) - len(exact), exact
        if not matches:
            if not measured_only:
                self.trace.append(Step(what, "no artifact" + (
                    f"; {others} of other products passed over: {self.decl.name} is served configs of its exact "
                    "device only" if others else "")))
            return None
        predicted: _Found | None = None
        for entry in matches:
            if within is not None and entry.source.rank[0] > within:
                continue
            rivals = sorted(index.claimants(layer, token, entry) - {entry.source.name})
            if rivals:
                self.tried.add(id(entry))
                self.reasons.append(f"{entry.path}: contested: {', '.join(rivals)} also claim this key at the same "
                                    f"precedence ({entry.source.describe()}); neither is served until {PACKAGES_ENV} "
                                    f"ranks them")
                self.trace.append(Step(what, self.reasons[-1]))
                continue
            artifact = entry.load(self.problems)
            if artifact is None:
                self.tried.add(id(entry))
                self.reasons.append(f"{entry.path}: unusable ({self._last_problem(entry)})")
                self.trace.append(Step(what, self.reasons[-1]))
                continue
            if artifact.selection.rule == "predicted":
                if predicted is None and not measured_only:
                    predicted = self._usable(artifact, entry, what)
                continue
            if predicted is not None and predicted.entry.source.rank[0] < entry.source.rank[0]:
                continue  # a label a source wrote never lifts it above a source of a better standing
            found = self._usable(artifact, entry, what)
            if found is not None:
                return found
        return predicted

    def _usable(self, artifact: Any, entry: Entry, what: str) -> _Found | None:
        self.tried.add(id(entry))
        found = self._serve(artifact, entry)
        if isinstance(found, _Found):
            return found
        self.reasons.append(f"{entry.path}: {found}")
        self.trace.append(Step(what, self.reasons[-1]))
        return None

    def _serve(self, artifact: Any, entry: Entry) -> _Found | str:
        """What a loaded artifact serves for this call: its winner unless the one rule
        :func:`~flyconfigs.registry.check.refusal` (which validate applies too) refuses
        it for the key; at a nearer key's artifact whose winner the rule accepts for its
        own key, the winner as the kernel adapts it to the key (its optional
        ``adapt_config``), checked again; else why not.  A winner refused for the
        artifact's own key is a problem of the artifact (logged once); one that only
        does not fit the key is routine (kept in the reasons)."""
        decl, key, query = self.decl, self.key, self.query
        refused = refusal(decl, artifact, key, query)
        if refused is None:
            return _Found(entry, artifact, dict(artifact.winner.config), None)
        kind, why = refused
        dist = entry.source.name if entry.source.kind == "package" else None
        if kind == "test-double":
            self.problems.report(Problem(kind, str(entry.path), why, dist))
            return "refused (made by a test double)"
        if kind == "stale-artifact":
            self.problems.report(Problem(kind, str(entry.path), why, dist))
            return f"stale: {why}"
        own = refused if entry.key == key else refusal(decl, artifact, entry.key, query)
        if own is None:
            winner = dict(artifact.winner.config)
            adapted = _adapt(decl, winner, key, query)
            if adapted is not None and check_config(decl, adapted, key, query) is None:
                return _Found(entry, artifact, adapted, winner)
            return f"{_ROUTINE} ({decl.name}: {why})"
        # Reported for the artifact's own key, not the asked one: the problem is the
        # artifact's, so every row asked gives the same problem and it is logged once.
        self.problems.report(Problem(own[0], str(entry.path), f"{decl.name} refuses its winner for its own key "
                                     f"{dict(entry.key)} on {query.describe()}: {own[1]}", dist))
        return f"refused by {decl.name}: {why}"

    def _last_problem(self, entry: Entry) -> str:
        for problem in reversed(self.problems.problems()):
            if problem.where == str(entry.path):
                return problem.kind
        return "unreadable"


def _selection(artifact: Any) -> Literal["measured", "predicted", "imported"]:
    rule = artifact.selection.rule
    if rule == "predicted":
        return "predicted"
    return "imported" if rule == "imported" else "measured"


def _how(artifact: Any) -> str:
    if artifact.selection.rule == "predicted":
        model = artifact.provenance.model
        return f"predicted (not measured on this device; model {model.name} {model.version})" if model else "predicted"
    return "imported (measured by another tool)"


_ROUTINE = "its winner does not fit this key"
"""The reason a nearer tuned key is passed over for a routine cause (see ``_serve``)."""


@dataclass(frozen=True)
class _Found:
    """What one step serves: the entry, its artifact, the config and, when the kernel
    adapted the winner to the asked key, the winner as tuned."""

    entry: Entry
    artifact: Any
    config: dict[str, KeyValue]
    adapted_from: dict[str, KeyValue] | None


def _adapt(decl: KernelDecl, config: Mapping[str, KeyValue], key: dict[str, KeyValue],
           device: DeviceQuery) -> dict[str, KeyValue] | None:
    """The kernel's optional ``adapt_config(config, key, device)``: ``config`` changed to
    fit ``key``, or ``None``.  A kernel without it adapts nothing; one that raises or
    answers something other than a mapping adapts nothing either (serving goes on)."""
    try:
        adapted = decl.adapt_config(config, key, device)
    except Exception:  # noqa: BLE001 - a kernel's optional hook failing must not break a serving call
        logger.debug("%s: adapt_config raised for %s", decl.name, dict(key), exc_info=True)
        return None
    return dict(adapted) if isinstance(adapted, Mapping) else None


def _changes(before: Mapping[str, KeyValue], after: Mapping[str, KeyValue]) -> str:
    """``vector_bytes 16 -> 4``: what an adaptation changed."""
    names = [n for n in {**before, **after} if before.get(n) != after.get(n)]
    return ", ".join(f"{n} {before.get(n)!r} -> {after.get(n)!r}" for n in names) or "nothing"
