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

   and within each step the sources in order: ``FLYCONFIGS_PATH`` directories as listed;
   then the data packages ``FLYCONFIGS_PACKAGES`` lists, in its order; then each
   target's official ``flyconfigs-<target>``; then any other package by normalized
   distribution name.  When two sources hold an artifact for the same kernel, device
   and key, the first in that order wins and the collision is reported
   (``flyconfigs doctor``, which fails on one nobody chose: between packages that
   ``FLYCONFIGS_PACKAGES`` does not both rank);
3. the kernel's default heuristic.

Nearest key: the smallest sum over ordinal axes of ``|log2 a - log2 b|``; a tie goes to
the larger tuned value.  An artifact is served only when the kernel's own
``check_config`` accepts its winner for the asked key and device, and never to a real
device when a test double made it.  A missing, corrupt, mismatched, invalid or refused
artifact is skipped with one warning per cause and the search goes on; the reasons are
kept in the record.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import invalidate_caches
from types import MappingProxyType
from typing import Any, Literal

from flyconfigs.errors import ArtifactError
from flyconfigs.registry.declarations import (
    KernelDecl,
    KeyValue,
    check_config,
    check_key,
    forget_loaded,
    kernel_declaration,
)
from flyconfigs.registry.device import DEVICE_ENV, Detector, DeviceQuery, as_query, detect_with, installed_detector, parse_device_spec
from flyconfigs.registry.problems import Problem, ProblemLog
from flyconfigs.registry.sources import (
    PACKAGES_ENV,
    Entry,
    LoadedPackage,
    PackageInfo,
    PackageRef,
    Source,
    find_packages,
    load_package,
    override_directories,
    scan_directory,
)
from flyconfigs.schema.models import TEST_DEVICE_PRODUCT, DeviceIdentity

__all__ = ["MEMO_LIMIT", "Collision", "Resolution", "Resolver", "Step"]

MEMO_LIMIT = 16384
"""Memoized resolutions kept per resolver; the oldest is dropped first beyond it."""

Layer = Literal["exact", "same-compute-units", "same-arch", "default"]
_LAYER_NAMES: tuple[Layer, Layer, Layer] = ("exact", "same-compute-units", "same-arch")


@dataclass(frozen=True)
class Resolution:
    """A resolved config and where it came from.

    ``source`` is ``override``, ``package`` or ``default``; ``layer`` the device layer that
    matched; ``key_match`` ``exact``, ``nearest`` or ``none``; ``borrowed`` is true for a
    same-arch match, with ``matched_device`` the device it was tuned on; ``reasons`` the
    chain of steps that fell through before this answer.
    """

    kernel: str
    key: Mapping[str, KeyValue]
    device: DeviceQuery | None
    config: Mapping[str, KeyValue]
    source: Literal["override", "package", "default"]
    layer: Layer
    key_match: Literal["exact", "nearest", "none"]
    borrowed: bool = False
    matched_key: Mapping[str, KeyValue] | None = None
    matched_device: DeviceIdentity | None = None
    origin: str | None = None
    version: str | None = None
    file: str | None = None
    reasons: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        """The record as plain JSON data (for ``--json`` output)."""
        return {
            "kernel": self.kernel,
            "key": dict(self.key),
            "device": None if self.device is None else self.device.describe(),
            "config": dict(self.config),
            "source": self.source,
            "layer": self.layer,
            "key_match": self.key_match,
            "borrowed": self.borrowed,
            "matched_key": None if self.matched_key is None else dict(self.matched_key),
            "matched_device": None if self.matched_device is None else self.matched_device.model_dump(mode="json"),
            "origin": self.origin,
            "version": self.version,
            "file": self.file,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Collision:
    """Several sources hold an artifact for one kernel, device and key; ``winner`` serves.

    ``expected`` when someone chose the order: the winner is an override directory, or
    every package involved is ranked by ``FLYCONFIGS_PACKAGES``."""

    kernel: str
    key: Mapping[str, KeyValue]
    device: DeviceIdentity
    winner: str
    shadowed: tuple[str, ...]
    expected: bool = False


@dataclass(frozen=True)
class Step:
    """One step of an explanation: what was looked for and what happened."""

    looked_for: str
    outcome: str


@dataclass
class _Index:
    entries: list[Entry]
    by_layer: tuple[dict[tuple[object, ...], list[Entry]], ...] = field(default_factory=tuple)


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
        self._lock = threading.RLock()
        self._memo: dict[tuple[object, ...], Resolution] = {}
        self._indexes: dict[tuple[str, str], _Index] = {}
        self._overrides: list[Entry] | None = None
        self._refs: list[PackageRef] | None = None
        self._loaded: dict[str, list[LoadedPackage]] = {}
        self._device: tuple[DeviceQuery | None, str] | None = None
        self._observers: list[Observer] = []
        self.problems = ProblemLog()
        self.generation = 0
        """Incremented by :meth:`refresh`; callers that cache resolutions compare it."""

    # -- caches -------------------------------------------------------------------------

    def refresh(self) -> None:
        """Drop every cache: the memo, the source index, the detected device and the
        record of problems already logged.  Packages installed or removed since are seen
        by the next resolve, and problems that remain are logged once more."""
        with self._lock:
            invalidate_caches()
            forget_loaded()
            self._memo.clear()
            self._indexes.clear()
            self._overrides = None
            self._refs = None
            self._loaded = {}
            self._device = None
            self.problems = ProblemLog()
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
        :class:`~flyconfigs.errors.InvalidDeviceError` for a bad call."""
        memo_key: tuple[object, ...] | None
        try:
            name = kernel if isinstance(kernel, str) else kernel.name
            # Typed and order-free: ``M=True`` or ``M=1.0`` never hits the entry of ``M=1``.
            memo_key = (name, device, *[(k, v.__class__, v) for k, v in sorted(key.items())])
            hit = self._memo.get(memo_key)
        except (TypeError, AttributeError):  # not a mapping, or unhashable: validation names it
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
        norm = check_key(decl, key)
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
            self._detector = installed_detector()
        return detect_with(self._detector)

    def _search(
        self, decl: KernelDecl, key: dict[str, KeyValue], query: DeviceQuery | None, why: str, trace: list[Step]
    ) -> Resolution:
        reasons: list[str] = []
        if query is None:
            reasons.append(f"no device known: {why}")
            trace.append(Step("the current device", reasons[-1]))
            return self._default(decl, key, None, reasons)
        index = self._index(decl.name, query.arch)
        tokens = query.layers()
        tried: set[int] = set()
        plan = [(0, "exact"), (1, "exact"), (0, "nearest"), (1, "nearest"), (2, "exact"), (2, "nearest")]
        for layer, mode in plan:
            token = tokens[layer]
            what = f"{_LAYER_NAMES[layer]} device, {mode} key"
            if token is None:
                trace.append(Step(what, "skipped: the device's identity is incomplete"))
                continue
            pool = index.by_layer[layer].get(token, [])
            matches = _exact(pool, key) if mode == "exact" else _nearest(pool, key, decl)
            matches = [e for e in matches if id(e) not in tried]
            if not matches:
                trace.append(Step(what, "no artifact"))
                continue
            for entry in matches:
                tried.add(id(entry))
                artifact = entry.load(self.problems)
                if artifact is None:
                    reasons.append(f"{entry.path}: unusable ({self._last_problem(entry)})")
                    trace.append(Step(what, reasons[-1]))
                    continue
                refusal = self._refuse(decl, artifact, entry, key, query)
                if refusal is not None:
                    reasons.append(f"{entry.path}: {refusal}")
                    trace.append(Step(what, reasons[-1]))
                    continue
                trace.append(Step(what, f"found {entry.path} ({entry.source.describe()})"))
                return Resolution(
                    kernel=decl.name,
                    key=MappingProxyType(dict(key)),
                    device=query,
                    config=MappingProxyType(dict(artifact.winner.config)),
                    source=entry.source.kind,
                    layer=_LAYER_NAMES[layer],
                    key_match=mode,  # type: ignore[arg-type]
                    borrowed=layer == 2,
                    matched_key=MappingProxyType(dict(entry.key)),
                    matched_device=entry.device,
                    origin=entry.source.name,
                    version=entry.source.version,
                    file=str(entry.path),
                    reasons=tuple(reasons),
                )
        reasons.append(f"no artifact for {decl.name} on {query.describe()}")
        return self._default(decl, key, query, reasons)

    def _refuse(
        self, decl: KernelDecl, artifact: Any, entry: Entry, key: dict[str, KeyValue], query: DeviceQuery
    ) -> str | None:
        """Why a loaded artifact may not serve this call (logged once), or ``None``."""
        if artifact.from_test_double and query.product != TEST_DEVICE_PRODUCT:
            problem = Problem("test-double", str(entry.path), "made by the test backend; never served to a real device",
                              entry.source.name if entry.source.kind == "package" else None)
            self.problems.report(problem)
            return "refused (made by a test double)"
        why = check_config(decl, artifact.winner.config, key, query)
        if why is not None:
            self.problems.report(Problem(
                "invalid-config", str(entry.path),
                f"{decl.name} refuses its winner for {dict(key)} on {query.describe()}: {why}",
                entry.source.name if entry.source.kind == "package" else None,
            ))
            return f"refused by {decl.name}: {why}"
        return None

    def _last_problem(self, entry: Entry) -> str:
        for problem in reversed(self.problems.problems()):
            if problem.where == str(entry.path):
                return problem.kind
        return "unreadable"

    def _default(
        self, decl: KernelDecl, key: dict[str, KeyValue], query: DeviceQuery | None, reasons: list[str]
    ) -> Resolution:
        config = decl.default_config(key, query)
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
        norm = check_key(decl, key)
        query, why = self._device_query(device)
        trace = [Step("device", f"{query.describe() if query else 'unknown'} ({why})")]
        with self._lock:
            if query is not None:
                order = self.sources_for(query.arch)
                trace.append(Step("sources, in precedence order", "; ".join(s.describe() for s in order) or "none"))
            return self._search(decl, norm, query, why, trace), trace

    def sources_for(self, arch: str) -> list[Source]:
        """The sources that can serve ``arch``, in precedence order."""
        with self._lock:
            sources = {id(e.source): e.source for e in self._entries_for(arch)}
            for package in self._packages_for(arch):
                if package.source is not None:
                    sources.setdefault(id(package.source), package.source)
            return sorted(sources.values(), key=lambda s: s.rank)

    # -- the index ----------------------------------------------------------------------
    # Override directories are scanned whole (they hold local tuning output); a data
    # package's manifest is read only when a device of its target is first resolved,
    # since every row of a package belongs to its target.

    def _override_entries(self) -> list[Entry]:
        if self._overrides is None:
            dirs = override_directories(os.pathsep.join(self._paths) if self._paths is not None else None)
            entries: list[Entry] = []
            for rank, folder in enumerate(dirs):
                entries.extend(scan_directory(folder, rank, self.problems))
            self._overrides = entries
        return self._overrides

    def _package_refs(self) -> list[PackageRef]:
        if self._refs is None:
            self._refs = find_packages(first_rank=len(override_directories(
                os.pathsep.join(self._paths) if self._paths is not None else None
            )), problems=self.problems)
        return self._refs

    def _packages_for(self, target: str) -> list[LoadedPackage]:
        loaded = self._loaded.get(target)
        if loaded is None:
            loaded = []
            for ref in self._package_refs():
                if ref.target == target:
                    package = load_package(ref, self.problems)
                    if package is not None:
                        loaded.append(package)
            self._loaded[target] = loaded
        return loaded

    def _entries_for(self, arch: str) -> list[Entry]:
        entries = [e for e in self._override_entries() if e.device.arch == arch]
        for package in self._packages_for(arch):
            entries.extend(package.entries)
        return entries

    def _index(self, kernel: str, arch: str) -> _Index:
        index = self._indexes.get((kernel, arch))
        if index is None:
            entries = [e for e in self._entries_for(arch) if e.kernel == kernel]
            layers: tuple[dict[tuple[object, ...], list[Entry]], ...] = ({}, {}, {})
            for entry in entries:
                for layer, token in enumerate(entry.device.layers()):
                    layers[layer].setdefault(token, []).append(entry)
            index = self._indexes[(kernel, arch)] = _Index(entries, layers)
        return index

    # -- what doctor and list read -------------------------------------------------------

    def _all_targets(self) -> list[str]:
        targets = {ref.target for ref in self._package_refs()}
        targets.update(e.device.arch for e in self._override_entries())
        return sorted(targets)

    def packages(self) -> list[PackageInfo]:
        """Installed data packages whose manifests are readable, in precedence order
        (reads every manifest)."""
        with self._lock:
            found = [p.info for t in self._all_targets() for p in self._packages_for(t)]
            return sorted(found, key=lambda info: [r.distribution for r in self._package_refs()].index(info.distribution))

    def all_entries(self) -> Iterator[Entry]:
        """Every entry of every source (reads every manifest)."""
        with self._lock:
            entries = [e for t in self._all_targets() for e in self._entries_for(t)]
        yield from sorted(entries, key=lambda e: e.source.rank)

    def collisions(self) -> list[Collision]:
        """Every collision between sources, each also logged once."""
        return _collisions(list(self.all_entries()), self.problems)

    def check_all(self) -> list[Problem]:
        """Load every artifact, check each winner with its kernel's declaration (when
        this environment declares the kernel) and find every collision, as doctor does;
        return every problem seen so far."""
        from flyconfigs.errors import UnknownKernelError

        for entry in self.all_entries():
            artifact = entry.load(self.problems)
            if artifact is None:
                continue
            dist = entry.source.name if entry.source.kind == "package" else None
            if artifact.from_test_double:
                self.problems.report(Problem("test-double", str(entry.path),
                                             "made by the test backend; never served to a real device", dist))
            try:
                decl = kernel_declaration(entry.kernel, self.problems)
            except UnknownKernelError:
                continue
            why = check_config(decl, artifact.winner.config, dict(artifact.key), DeviceQuery.of(entry.device))
            if why is not None:
                self.problems.report(Problem("invalid-config", str(entry.path), f"{decl.name} refuses its winner: {why}", dist))
        self.collisions()
        return self.problems.problems()


def _exact(pool: list[Entry], key: dict[str, KeyValue]) -> list[Entry]:
    return [e for e in pool if e.key == key]


def _nearest(pool: list[Entry], key: dict[str, KeyValue], decl: KernelDecl) -> list[Entry]:
    ordinal = [a.name for a in decl.key_axes if a.ordinal]
    if not ordinal:
        return []
    scored: list[tuple[float, tuple[float, ...], int, Entry]] = []
    for rank, entry in enumerate(pool):
        if entry.key.keys() != key.keys():
            continue
        if any(entry.key[a.name] != key[a.name] for a in decl.key_axes if not a.ordinal):
            continue
        values = [entry.key[n] for n in ordinal]
        if not all(type(v) is int for v in values):
            continue
        distance = sum(abs(_log2(int(entry.key[n])) - _log2(int(key[n]))) for n in ordinal)
        scored.append((distance, tuple(-float(v) for v in values), rank, entry))
    scored.sort(key=lambda item: item[:3])
    return [item[3] for item in scored]


def _log2(value: int) -> float:
    return math.log2(max(value, 1))


def _collisions(entries: list[Entry], problems: ProblemLog) -> list[Collision]:
    slots: dict[tuple[object, ...], list[Entry]] = {}
    for entry in entries:
        slots.setdefault(entry.slot(), []).append(entry)
    found = []
    for group in slots.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda e: e.source.rank)
        names = [_label(e) for e in group]
        deliberate = group[0].source.kind == "override" or all(e.source.standing == "chosen" for e in group)
        collision = Collision(group[0].kernel, dict(group[0].key), group[0].device, names[0], tuple(names[1:]), deliberate)
        found.append(collision)
        problems.report(
            Problem(
                "collision",
                str(group[1].path),
                f"{group[0].kernel} {dict(group[0].key)} on {group[0].device.describe()}: "
                f"{names[0]} wins over {', '.join(names[1:])}"
                + ("" if deliberate else f" (nobody chose this order: rank packages with {PACKAGES_ENV})"),
            ),
            logging.INFO if deliberate else logging.WARNING,
        )
    return found


def _label(entry: Entry) -> str:
    if entry.source.kind == "package":
        return f"{entry.source.name} {entry.source.version} ({entry.path.name})"
    return str(entry.path)
