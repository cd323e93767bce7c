"""What the registry knows about the kernel families of this environment: the list
``flyconfigs list`` prints, the process-wide records (:func:`kernel_record`,
:func:`forget_loaded`) and the choices ``FLYCONFIGS_KERNELS`` makes, with key parsing
(:mod:`~flyconfigs.registry.families.keys`).  It also re-exports the plugin contract of
:mod:`flyconfigs.registry.plugin`, the module a plugin imports, so that code written
against this one keeps working.  The registry never imports a kernel library except
through the entry-point group ``flyconfigs.kernels``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flyconfigs.errors import FlyconfigsError
from flyconfigs.registry.core.entrypoints import find_entry_points
from flyconfigs.registry.core.guard import Raised, guarded
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.families import loaded as _kernels
from flyconfigs.registry.families.contract import (
    NAME_PATTERN,
    Default,
    DeviceMatch,
    KernelDecl,
    KeyAxis,
    KeyValue,
    SourceBinding,
    SpelledKey,
    TunableVariants,
    normalize_key,
)
from flyconfigs.registry.families.kernel_choice import unknown_choices
from flyconfigs.registry.families.keys import parse_key_items, parse_spelled_items, parse_value
from flyconfigs.registry.families.loaded import (
    KERNEL_GROUP,
    KERNEL_OWNERS_ENV,
    RECORDS,
    LoadedKernel,
    kernel_name,
    register_kernel,
    unregister_kernel,
)
from flyconfigs.registry.families.registrations import registered_names
from flyconfigs.registry.plugin import (
    check_config,
    check_key,
    check_tunables,
    default_config,
    device_match,
    kernel_declaration,
    report_fault,
    spelled_key,
)

__all__ = [
    "KERNEL_GROUP",
    "KERNEL_OWNERS_ENV",
    "NAME_PATTERN",
    "DeclaredKernel",
    "Default",
    "DeviceMatch",
    "KernelDecl",
    "KeyAxis",
    "KeyValue",
    "LoadedKernel",
    "SourceBinding",
    "SpelledKey",
    "TunableVariants",
    "check_config",
    "check_kernel_choices",
    "check_key",
    "check_tunables",
    "declared_by",
    "declared_kernels",
    "default_config",
    "device_match",
    "forget_loaded",
    "kernel_declaration",
    "kernel_name",
    "kernel_record",
    "normalize_key",
    "parse_key_items",
    "parse_spelled_items",
    "parse_value",
    "register_kernel",
    "report_fault",
    "spelled_key",
    "unregister_kernel",
]


def __getattr__(name: str) -> Any:
    if name == "PROBLEMS":  # the process-wide table's problems, replaced by forget_loaded()
        return RECORDS.problems
    raise AttributeError(name)


def forget_loaded() -> None:
    """Forget the declarations the process-wide table loaded from entry points and the
    problems met finding them (after an install or uninstall; the default resolver's
    :meth:`~flyconfigs.registry.Resolver.refresh` calls this)."""
    RECORDS.clear()


def kernel_record(kernel: object, problems: ProblemLog | None = None) -> LoadedKernel:
    """The process-wide record of ``kernel`` (a name or a declaration); see
    :meth:`~flyconfigs.registry.families.loaded.KernelRecords.record` for what it raises."""
    return RECORDS.record(kernel, problems)


def check_kernel_choices(problems: ProblemLog | None = None) -> list[str]:
    """Report each kernel ``FLYCONFIGS_KERNELS`` names that nothing declares (the
    entry points and this process's registrations; no declaration is loaded); those
    names (what ``doctor`` asks)."""
    log = problems if problems is not None else RECORDS.problems
    names = {*registered_names(), *(f.entry_point.name for f in find_entry_points(KERNEL_GROUP, log))}
    return unknown_choices(names, log)


def declared_by(decl: KernelDecl) -> str | None:
    """The distribution whose ``flyconfigs.kernels`` entry point gave ``decl`` (the
    family's owner), or ``None`` for a declaration made in this process."""
    return _kernels.origin_of(decl)[1]


@dataclass(frozen=True)
class DeclaredKernel:
    """A kernel family this environment declares, as ``flyconfigs list`` shows it:
    its family version and the distribution (and its version) that owns it, ``None``
    for one registered in this process; ``problem`` says why it cannot be loaded."""

    name: str
    version: int | None
    distribution: str | None
    distribution_version: str | None
    problem: str | None = None


def declared_kernels(problems: ProblemLog | None = None) -> list[DeclaredKernel]:
    """Every kernel declared through the ``flyconfigs.kernels`` entry points or in this
    process, by name, each loaded (as :func:`kernel_declaration` loads it) to read its
    version; one that cannot be loaded is listed with the reason."""
    log = problems if problems is not None else RECORDS.problems
    found = RECORDS.environment.entry_points(KERNEL_GROUP, log)
    rows = []
    for name in sorted({*registered_names(), *(f.entry_point.name for f in found)}):
        try:
            record = RECORDS.record(name, log)
        except FlyconfigsError as exc:
            dists = sorted({f.distribution for f in found if f.entry_point.name == name})
            rows.append(DeclaredKernel(name, None, ", ".join(dists) or None, None, str(exc)))
            continue
        dist, dist_version = record.distribution, record.distribution_version
        version = guarded(getattr, record.decl, "version")
        if isinstance(version, Raised):
            rows.append(DeclaredKernel(name, None, dist, dist_version, f"version {version}"))
            continue
        rows.append(DeclaredKernel(name, version, dist, dist_version))
    return rows
