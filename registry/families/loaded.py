"""A kernel, once discovered, is one record: :class:`LoadedKernel`.

Discovery makes the record once — the kernel's name, declaration object, how it arrived
(an entry point of the group ``flyconfigs.kernels``, a registration in this process, or a
declaration passed by the caller), its owning distribution — and everything downstream
(the resolver's memo, ownership and precedence, ``explain``, ``doctor``, ``validate``)
takes the record, never a name looked up again.  Two declarations of one name are two
records.  A registration in this process of a name another distribution declares is
served (it was asked for explicitly) but never silently: it is reported
(``kernel-collision``) and listed by ``doctor``.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from flyconfigs.errors import FlyconfigsError, KernelPluginError, UnknownKernelError
from flyconfigs.registry.core.entrypoints import FoundEntryPoint
from flyconfigs.registry.core.environment import Environment
from flyconfigs.registry.core.guard import Raised, guarded, guarded_load
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.families.contract import KernelDecl
from flyconfigs.registry.families.kernel_choice import KERNEL_OWNERS_ENV, choose
from flyconfigs.registry.families.registrations import (
    _REGISTRATIONS,
    check_members,
    note_change,
    register_kernel,
    unregister_kernel,
)

__all__ = ["KERNEL_GROUP", "KERNEL_OWNERS_ENV", "RECORDS", "KernelRecords", "LoadedKernel", "kernel_name", "origin_of",
           "register_kernel", "unregister_kernel"]

KERNEL_GROUP = "flyconfigs.kernels"
How = Literal["entry-point", "registered", "passed"]


@dataclass(eq=False)
class LoadedKernel:
    """One kernel as discovered: compared and hashed by identity, so a memo keyed by it
    never answers for another declaration of the same name.

    ``distribution`` is the distribution whose ``flyconfigs.kernels`` entry point gives
    this declaration (the family's owner), ``None`` for one made in this process."""

    name: str
    decl: KernelDecl
    how: How
    where: str
    """Where it came from, for messages."""
    distribution: str | None = None
    distribution_version: str | None = None
    settled: bool = field(default=False, repr=False)
    """For a registration: whether its distribution was looked for (see :func:`_settle`)."""

    @cached_property
    def digest(self) -> str | None:
        """The declaration's ``source_sha256()``, asked once (hashing a source on every
        lookup would make each miss read files); raises what it raises."""
        return self.decl.source_sha256()


class KernelRecords:
    """The records one resolver (or the process, :data:`RECORDS`) has discovered, and the
    :class:`~flyconfigs.registry.core.environment.Environment` snapshot they were found in
    (``environment``: the settings and one scan of the entry points, which the resolver's
    catalog and detector read too).  Every record is the table's own: the registrations
    of this process are copied in (:meth:`registered`: again after a registration changes
    them, and afresh after :meth:`clear`), so refreshing one resolver's table, or settling
    a registration's distribution there, leaves every other table alone."""

    def __init__(self) -> None:
        self.environment = Environment()
        self.loaded: dict[str, LoadedKernel] = {}
        self.passed: dict[int, LoadedKernel] = {}
        self.problems = ProblemLog(self.origin_of)
        self._lock = threading.RLock()
        self._registered: dict[str, LoadedKernel] = {}
        self._registrations = -1
        """The :data:`_REGISTRATIONS` generation :attr:`_registered` copies."""

    def clear(self) -> None:
        """Forget what entry points gave, the environment snapshot, the copies of the
        registrations (their collisions are reported once more) and the problems met
        (after an install)."""
        with self._lock:
            note_change()
            self.environment = Environment()
            self.loaded = {}
            self.passed = {}
            self.problems = ProblemLog(self.origin_of)
            self._registered, self._registrations = {}, -1

    def registered(self) -> dict[str, LoadedKernel]:
        """This table's records of the declarations registered in this process, by name:
        copied when first asked and whenever a registration has changed since (a record
        whose declaration is still registered is kept, with what was settled of it)."""
        if self._registrations == _REGISTRATIONS.generation:
            return self._registered
        with self._lock:
            generation, declared = _REGISTRATIONS.generation, dict(_REGISTRATIONS.declared)
            kept = self._registered
            self._registered = {
                name: kept[name] if name in kept and kept[name].decl is decl else
                LoadedKernel(name, decl, "registered", f"a {type(decl).__name__} registered in this process")
                for name, decl in declared.items()}
            self._registrations = generation
            return self._registered

    def known(self, kernel: object) -> LoadedKernel | None:
        """The record of ``kernel`` already made, without discovering anything (the
        resolver's hot path); ``None`` when it has to be discovered."""
        if isinstance(kernel, str):
            registered = (self._registered if self._registrations == _REGISTRATIONS.generation
                          else self.registered()).get(kernel)
            if registered is not None:
                return registered if registered.settled else None
            return self.loaded.get(kernel)
        found = self.passed.get(id(kernel))
        return found if found is not None and found.decl is kernel else None

    def record(self, kernel: object, problems: ProblemLog | None = None) -> LoadedKernel:
        """The record of ``kernel`` (a name, or a declaration object).

        Raises :class:`UnknownKernelError` naming the kernels that are declared, or
        saying why a declared one cannot be loaded; :class:`AmbiguousKernelError` when
        several distributions declare the name and none was chosen;
        :class:`KernelPluginError` naming the distribution when a required member of the
        declaration raises."""
        log = problems if problems is not None else self.problems
        if not isinstance(kernel, str):
            return self._of_object(kernel, log)
        with self._lock:
            registered = self.registered().get(kernel)
            if registered is not None:
                _settle(registered, log, self.environment)
                return registered
            found = self.loaded.get(kernel)
            if found is None:
                found = self.loaded[kernel] = _load(kernel, log, self.environment)
            return found

    def origin_of(self, decl: object) -> tuple[str, str | None]:
        """Where ``decl`` came from, for messages, and its distribution when known, as
        this table's records say."""
        for record in (*self.registered().values(), *self.loaded.values(), *self.passed.values()):
            if record.decl is decl:
                return record.where, record.distribution
        return f"a {type(decl).__name__} passed by the caller", None

    def _of_object(self, decl: object, log: ProblemLog) -> LoadedKernel:
        if not isinstance(decl, KernelDecl):
            raise UnknownKernelError(f"kernel must be a name or a KernelDecl, got {type(decl).__name__}")
        with self._lock:
            known = self.known(decl)
            if known is not None:
                return known
            name = kernel_name(decl)
            try:  # a registered declaration, or an entry point's, passed as an object: its record
                named: LoadedKernel | None = self.record(name, log)
            except FlyconfigsError:
                named = None
            if named is None or named.decl is not decl:
                named = LoadedKernel(name, decl, "passed", f"a {type(decl).__name__} passed by the caller")
            if len(self.passed) >= 256:
                self.passed.clear()
            self.passed[id(decl)] = named  # so the hot path finds it (known() checks the object)
            return named


RECORDS = KernelRecords()
"""The process-wide table (the default resolver's, and :func:`kernel_declaration`'s)."""


def _settle(record: LoadedKernel, log: ProblemLog, environment: Environment) -> None:
    """Find, once, whether a registered declaration is the object some distribution's
    entry point names (then it keeps that distribution) and report a registration that
    replaces another distribution's declaration of its name.  Done at first lookup, not
    at registration: a decorator registers while its module is still being imported."""
    if record.settled:
        return
    record.settled = True
    found = [f for f in environment.entry_points(KERNEL_GROUP, log) if f.entry_point.name == record.name]
    for item in found:
        if _object_of(item) is record.decl:
            record.distribution, record.distribution_version = item.distribution, item.version
            record.where = f"entry point {item.entry_point.value!r} of {item.distribution} {item.version}"
            return
    for item in found:
        log.report(Problem("kernel-collision", record.where,
                           f"replaces kernel {record.name!r} of {item.distribution} {item.version} "
                           f"({item.entry_point.value}) in this process", item.distribution))


def _object_of(item: FoundEntryPoint) -> object:
    """What ``item``'s entry point names, only if its module is already imported (never
    importing a distribution's code for this)."""
    module = sys.modules.get(item.entry_point.module)
    target: Any = module
    for part in (item.entry_point.attr or "").split(".") if module is not None else ():
        target = getattr(target, part, None)
    return target if module is not None else None


def _load(kernel: str, log: ProblemLog, environment: Environment) -> LoadedKernel:
    found = environment.entry_points(KERNEL_GROUP, log)
    matching = [f for f in found if f.entry_point.name == kernel]
    if not matching:
        known = sorted({*_REGISTRATIONS.declared, *(f.entry_point.name for f in found)})
        raise UnknownKernelError(f"unknown kernel {kernel!r}; declared kernels: {', '.join(known) or 'none'}")
    # FLYCONFIGS_KERNELS as set now, not the snapshot's: a name that failed to load
    # (AmbiguousKernelError says to set it) caches nothing, so the next lookup sees it.
    chosen = choose(kernel, matching, log)
    where = f"entry point {chosen.entry_point.value!r} of {chosen.distribution} {chosen.version}"
    decl = guarded_load(chosen.entry_point.load)
    if isinstance(decl, Raised):
        raise UnknownKernelError(f"kernel {kernel!r}: {where} cannot be loaded ({type(decl.exc).__name__}: {decl.exc})")
    try:
        name = check_members(decl, kernel, where)
    except KernelPluginError as exc:
        log.report(Problem("kernel-error", where, f"{exc.member} {exc.what}; kernel {kernel!r} cannot be served",
                           chosen.distribution))
        raise
    if name != kernel:
        raise UnknownKernelError(f"kernel {kernel!r}: {where} declares a kernel named {name!r}")
    return LoadedKernel(kernel, decl, "entry-point", where, chosen.distribution, chosen.version)


def origin_of(decl: object, problems: ProblemLog | None = None) -> tuple[str, str | None]:
    """Where ``decl`` came from, for messages, and its distribution when known: as the
    resolver whose log ``problems`` is knows it, else as the process-wide table does."""
    if problems is not None and problems.origins is not None:
        return problems.origins(decl)
    return RECORDS.origin_of(decl)


def kernel_name(decl: KernelDecl) -> str:
    """``decl.name``; :class:`KernelPluginError` naming where the declaration came from
    when reading it raises or gives anything but a string."""
    name = guarded(getattr, decl, "name")
    if isinstance(name, Raised):
        raise KernelPluginError(f"<{type(decl).__name__}>", origin_of(decl)[0], "name", str(name))
    if not isinstance(name, str):
        raise KernelPluginError(f"<{type(decl).__name__}>", origin_of(decl)[0], "name",
                                f"is a {type(name).__name__}, not a str")
    return name
