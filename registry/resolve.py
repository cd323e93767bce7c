"""Resolution: which config a kernel gets for a key on a device, and why.

A :class:`Resolver` answers from its memo (a dictionary lookup; negative results are
memoized too), keyed by the kernel's loaded record (never its name: a declaration passed
in is a record of its own, so two of one name that differ in ``device_match`` never share
answers), the device and the typed key; a call repeated exactly as given, by a kernel's
name, is found first with one lookup of the call as given, trusted only while no kernel
was registered, unregistered or forgotten in the process since.  Otherwise it runs the one search
(:func:`~flyconfigs.registry.search.steps.search`) that ``explain``, ``doctor`` and
``validate`` run too, so they cannot disagree.  The order the search serves in is written
once, in :func:`flyconfigs.registry.search.preference.rank_key`'s docstring (``docs/resolution.md``
explains it); where nothing serves, the family's default heuristic does, checked like any
served config.  When several sources hold an artifact for one family, device and key,
the best ranked serves and the collision is reported (:mod:`flyconfigs.registry.search.collisions`;
``doctor`` fails on one nobody chose); two artifacts of one slot in one source are
duplicates, the more recently made serving.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from importlib import invalidate_caches
from types import MappingProxyType
from typing import Any

from flyconfigs.registry.core.memo import MEMO_LIMIT, PLAIN, UNHASHABLE, bounded_put, call_as_given, plain
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.detecting import UNSET, Detecting
from flyconfigs.registry.families import registrations as _registrations
from flyconfigs.registry.families.contract import KernelDecl, KeyValue
from flyconfigs.registry.families.family import Family
from flyconfigs.registry.families.loaded import KernelRecords, LoadedKernel
from flyconfigs.registry.inventory import Inventory, skipped_overrides
from flyconfigs.registry.observers import Observed, Observer
from flyconfigs.registry.search.catalog import Catalog
from flyconfigs.registry.search.records import Collision, Resolution, Step
from flyconfigs.registry.search.steps import search, serve_default
from flyconfigs.registry.sources.device import (
    Detector,
    DeviceQuery,
    as_query,
    memo_token,
)
from flyconfigs.registry.sources.ownership import Owner, owner_of
from flyconfigs.schema.canonical import canonical_text
from flyconfigs.schema.models import DeviceIdentity

__all__ = ["MEMO_LIMIT", "Collision", "Resolution", "Resolver", "Step"]


class Resolver(Inventory, Observed, Detecting):
    """Answers :meth:`resolve`; holds the memo, the kernel records, the source index and
    the problem log.

    Thread-safe: the lock guards only the memo and the swapping of caches; files are read
    and parsed, and plugins called, outside it.  One process-wide instance backs
    :func:`flyconfigs.resolve` and shares the process-wide kernel table; every other
    resolver has its own, so refreshing one never resets another's."""

    _UNSET: Any = UNSET

    def __init__(self, paths: list[str] | None = None, detector: Detector | None = _UNSET, *,
                 packages: bool = True, kernels: KernelRecords | None = None) -> None:
        """``paths`` replaces ``FLYCONFIGS_PATH``; ``detector`` reports the current GPU
        (default: the one installed through the entry-point group
        ``flyconfigs.detectors``, looked up when first needed; ``None``: never detect);
        ``packages=False`` leaves installed data packages out (``validate`` judges the
        files it is given alone); ``kernels`` the table of kernel records (default: a
        table of its own)."""
        self._paths = paths
        self._packages = packages
        self._detector = detector
        self._detector_installed = detector is Resolver._UNSET
        self._lock = threading.RLock()
        self._memo: dict[tuple[object, ...], Resolution] = {}
        # The memo's answers again, keyed by the key and device exactly as a caller
        # passed them (filled on a memo hit), so a repeated call skips sorting the key.
        self._seen: dict[tuple[object, ...], Resolution] = {}
        # The same for calls by a kernel's name, valid while ``_named_at`` is the
        # process's count of registrations (``registrations.changes``): one hash, no
        # record looked up.
        self._named: dict[tuple[object, ...], Resolution] = {}
        self._named_at = _registrations.changes
        self.kernels = kernels if kernels is not None else KernelRecords()
        self.problems = ProblemLog(self.kernels.origin_of)
        self._families: dict[LoadedKernel, Family] = {}
        self._catalog = Catalog(paths, self.problems, packages, self.kernels.environment)
        self._device: tuple[DeviceQuery | None, str] | None = None
        self._observers: list[Observer] = []
        self.generation = 0
        """Incremented by :meth:`refresh`; callers that cache resolutions compare it."""

    def refresh(self) -> None:
        """Drop every cache of this resolver: the memo, its kernel records, the source
        index, the detected device (and the installed detector chosen) and the record
        of problems already logged (with its fault set: the plugin members already
        reported as raising).  Packages installed or removed since are seen by the
        next resolve, and problems that remain are logged once more."""
        with self._lock:
            invalidate_caches()
            self.kernels.clear()
            self._memo.clear()
            self._seen.clear()
            self._named.clear()
            self._device = None
            if self._detector_installed:  # the detectors installed, or FLYCONFIGS_DETECTOR, may have changed
                self._detector = Resolver._UNSET
            self.problems = ProblemLog(self.kernels.origin_of)
            self._families = {}
            self._catalog = Catalog(self._paths, self.problems, self._packages, self.kernels.environment)
            self.generation += 1

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
        or answers a config its own checks refuse when no artifact serves the call,
        raises :class:`~flyconfigs.errors.KernelPluginError` naming its distribution
        (there is no config to serve)."""
        if kernel.__class__ is str:
            try:
                # A call repeated exactly as given (the kernel's name, the key with each
                # value's type, in the caller's order, and the device): one hash, answered
                # while this name still means the record it meant (no registration since).
                # The tuple of :func:`~flyconfigs.registry.core.memo.call_as_given`, built inline:
                # this is every eager call's path, and a function call is a third of it.
                values = key.values()
                hit = self._named.get((kernel, device, *key, *values, *map(type, values)))
            except (TypeError, AttributeError):  # unhashable or not a mapping: the memo's own forms
                hit = None
            if hit is not None and self._named_at == _registrations.changes:
                if self._observers:
                    self._notify(hit)
                return hit
        return self._resolve(kernel, key, device)

    def _resolve(self, kernel: str | KernelDecl, key: Mapping[str, object],
                 device: DeviceIdentity | DeviceQuery | str | None) -> Resolution:
        """:meth:`resolve` past the memo of calls by name: the memos by record, then the search."""
        changes = _registrations.changes
        record = self.kernels.known(kernel)
        seen: tuple[object, ...] | None = None
        if record is not None and kernel.__class__ is not str:
            try:
                # A declaration object's call as given, by its record.
                seen = (record, device, *key.items(), *map(type, key.values()))
                hit = self._seen.get(seen)
            except (TypeError, AttributeError):  # unhashable or not a mapping: the memo's own forms
                seen = hit = None
            if hit is not None:
                if self._observers:
                    self._notify(hit)
                return hit
        generation = self.generation
        memo_key: tuple[object, ...] | None
        try:
            # Typed and order-free: ``M=True`` or ``M=1.0`` never hits the entry of ``M=1``;
            # a float by its repr, as JSON tells them (``-0.0`` is not ``0.0``).  Anything
            # but a scalar (a tuple of floats is equal as ``(0.0,)`` and ``(-0.0,)``) takes
            # the canonical form below.
            memo_key = (record, memo_token(device), *[
                (k, v.__class__, v if v.__class__ in PLAIN else repr(v) if v.__class__ is float else UNHASHABLE)
                for k, v in sorted(key.items())])
            hash(memo_key)  # before the kernel is known too: a list value must take the canonical form
            hit = self._memo.get(memo_key) if record is not None else None
        except TypeError:  # a list or object value: its canonical JSON is the typed form
            try:
                memo_key = (record, memo_token(device), canonical_text(dict(key)))
                hash(memo_key)
                hit = self._memo.get(memo_key) if record is not None else None
            except (TypeError, ValueError, AttributeError):
                hit = memo_key = None
        except AttributeError:  # not a mapping: the slow path names it
            hit = memo_key = None
        if hit is None:
            record = self.kernels.record(kernel, self.problems)
            hit = self._resolve_slow(record, key, device)
            if memo_key is not None:
                with self._lock:
                    if self.generation == generation:  # a refresh() since makes the answer stale
                        bounded_put(self._memo, (record, *memo_key[1:]), hit)
                        if plain(key):
                            self._remember(kernel, key, device, record, seen, changes, hit)
        elif plain(key):
            with self._lock:
                if self.generation == generation:
                    self._remember(kernel, key, device, record, seen, changes, hit)
        if self._observers:
            self._notify(hit)
        return hit

    def _remember(self, kernel: object, key: Mapping[str, object], device: object, record: LoadedKernel | None,
                  seen: tuple[object, ...] | None, changes: int, hit: Resolution) -> None:
        """Keep ``hit`` for the call as given, its key's values all plain (the lock held),
        while the kernel's name or object still means ``record``."""
        if kernel.__class__ is str:
            if _registrations.changes != changes or self.kernels.known(kernel) is not record:
                return  # a registration since: the name may mean another record now
            if self._named_at != changes:
                self._named.clear()
                self._named_at = changes
            try:
                bounded_put(self._named, call_as_given(kernel, key, device), hit)
            except TypeError:  # an unhashable device: the typed memo answers it
                pass
        elif seen is not None and seen[0] is record:
            bounded_put(self._seen, seen, hit)

    def family(self, record: LoadedKernel) -> Family:
        """``record``'s :class:`~flyconfigs.registry.families.family.Family` in this resolver (made
        once per record and refresh): its faults are reported to this resolver's log."""
        family = self._families.get(record)
        if family is None:
            with self._lock:
                family = self._families.setdefault(record, Family.of(record, self.problems))
        return family

    def _resolve_slow(self, record: LoadedKernel, key: object, device: object) -> Resolution:
        family = self.family(record)
        norm, filled, query, why = self._spelled(family, key, device)
        return _with_filled(self._search(family, norm, query, why, []), filled)

    def _spelled(self, family: Family, key: object,
                 device: object) -> tuple[dict[str, KeyValue], dict[str, KeyValue], DeviceQuery | None, str]:
        """``key`` as its user spelled it, made the family's and checked, the axes filled
        in, and the device: the caller's, else the one the key names, else the current one."""
        query, why = self._device_query(device) if device is not None else (None, "")
        spelled = family.spelled_key(key, query)
        if device is None:
            if spelled.device is not None:
                query, why = as_query(spelled.device, "the key's device"), "named by the key"
            else:
                query, why = self._device_query(None)
                if query is not None:  # the family may fill in what the device implies
                    spelled = family.spelled_key(key, query)
        return family.check_key(spelled.key), spelled.filled, query, why

    def owner(self, record: LoadedKernel) -> Owner:
        """The owner of ``record``'s family (made once per record)."""
        return owner_of(self.family(record), record.name)

    def _search(self, family: Family, key: dict[str, KeyValue], query: DeviceQuery | None, why: str,
                trace: list[Step]) -> Resolution:
        if query is None:
            trace.append(Step("the current device", f"no device known: {why}"))
            return serve_default(family, key, None, [f"no device known: {why}"])
        index = self._catalog.index(owner_of(family, family.name), query.arch)
        return search(family, key, query, index, trace)

    def explain(
        self, kernel: str | KernelDecl, key: Mapping[str, object], device: DeviceIdentity | DeviceQuery | str | None = None
    ) -> tuple[Resolution, list[Step]]:
        """Resolve without the memo and return every step taken, in order."""
        record = self.kernels.record(kernel, self.problems)
        family = self.family(record)
        norm, filled, query, why = self._spelled(family, key, device)
        trace = [Step("device", f"{query.describe() if query else 'unknown'} ({why})")]
        owner = self.owner(record)
        if query is not None:
            order = self._catalog.sources_for(query.arch, owner)
            if owner.packages or any(s.standing == "owner" for s in order):
                # Said where the owner's packages rank apart; otherwise each source's
                # standing already says all there is.
                trace.append(Step(f"owner of {record.name}", owner.describe()))
            trace.append(Step("sources, in precedence order",
                              ("; ".join(s.describe() for s in order) or "none")
                              + skipped_overrides(self._catalog.override_entries(), record.name, query.arch)))
        if filled:
            trace.append(Step("key as spelled", "filled in " + " ".join(f"{k}={canonical_text(v)}" for k, v in filled.items())))
        return _with_filled(self._search(family, norm, query, why, trace), filled), trace

    def serving(self, kernel: str | KernelDecl, key: Mapping[str, object], device: DeviceIdentity) -> Resolution:
        """What the search serves at ``key`` on exactly ``device`` (a tuned artifact's
        device), without the memo: how ``doctor`` and ``validate`` name the artifact that
        serves a slot several files claim."""
        family = self.family(self.kernels.record(kernel, self.problems))
        return self._search(family, family.check_key(key), DeviceQuery.of(device), "", [])


def _with_filled(resolution: Resolution, filled: dict[str, KeyValue]) -> Resolution:
    """``resolution`` recording the axes the family filled in (none: as it is)."""
    return dataclasses.replace(resolution, filled_in=MappingProxyType(filled)) if filled else resolution

