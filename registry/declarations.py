"""What the registry knows about kernel families, in one import: the contract
(:mod:`~flyconfigs.registry.contract`), the loaded records
(:mod:`~flyconfigs.registry.kernels`), the safe calls of a family's members
(:mod:`~flyconfigs.registry.calls`) and key parsing (:mod:`~flyconfigs.registry.keys`),
plus the list ``flyconfigs list`` prints.  The registry never imports a kernel library
except through the entry-point group ``flyconfigs.kernels``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flyconfigs.errors import FlyconfigsError
from flyconfigs.registry import kernels as _kernels
from flyconfigs.registry.calls import (
    check_config,
    check_key,
    check_tunables,
    default_config,
    device_match,
    report_fault,
    spelled_key,
)
from flyconfigs.registry.contract import (
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
from flyconfigs.registry.entrypoints import find_entry_points
from flyconfigs.registry.kernel_choice import unknown_choices
from flyconfigs.registry.kernels import (
    KERNEL_GROUP,
    KERNEL_OWNERS_ENV,
    TABLE,
    LoadedKernel,
    kernel_name,
    raised,
    register_kernel,
    unregister_kernel,
)
from flyconfigs.registry.keys import parse_key_items, parse_spelled_items, parse_value
from flyconfigs.registry.problems import ProblemLog

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
        return TABLE.problems
    raise AttributeError(name)


def forget_loaded() -> None:
    """Forget the declarations the process-wide table loaded from entry points and the
    problems met finding them (after an install or uninstall; the default resolver's
    :meth:`~flyconfigs.registry.Resolver.refresh` calls this)."""
    TABLE.clear()


def kernel_record(kernel: object, problems: ProblemLog | None = None) -> LoadedKernel:
    """The process-wide record of ``kernel`` (a name or a declaration); see
    :meth:`~flyconfigs.registry.kernels.KernelTable.record` for what it raises."""
    return TABLE.record(kernel, problems)


def kernel_declaration(kernel: object, problems: ProblemLog | None = None) -> KernelDecl:
    """The declaration of ``kernel`` (a name, or a declaration returned as is).

    Raises :class:`~flyconfigs.errors.UnknownKernelError` naming the kernels that are
    declared, or saying why a declared one cannot be loaded;
    :class:`~flyconfigs.errors.AmbiguousKernelError` when several distributions declare
    the name and none was chosen; :class:`~flyconfigs.errors.KernelPluginError` naming
    the distribution when the declaration's ``name`` (or another required member) raises.
    """
    return TABLE.record(kernel, problems).decl


def check_kernel_choices(problems: ProblemLog | None = None) -> list[str]:
    """Report each kernel ``FLYCONFIGS_KERNELS`` names that nothing declares (the
    entry points and this process's registrations; no declaration is loaded); those
    names (what ``doctor`` asks)."""
    log = problems if problems is not None else TABLE.problems
    names = {*_kernels._REGISTERED, *(f.entry_point.name for f in find_entry_points(KERNEL_GROUP, log))}
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
    log = problems if problems is not None else TABLE.problems
    found = TABLE.environment.entry_points(KERNEL_GROUP, log)
    rows = []
    for name in sorted({*_kernels._REGISTERED, *(f.entry_point.name for f in found)}):
        try:
            record = TABLE.record(name, log)
        except FlyconfigsError as exc:
            dists = sorted({f.distribution for f in found if f.entry_point.name == name})
            rows.append(DeclaredKernel(name, None, ", ".join(dists) or None, None, str(exc)))
            continue
        dist, dist_version = record.distribution, record.distribution_version
        try:
            version = record.decl.version
        except Exception as exc:  # noqa: BLE001 - a plugin's property failing is its error, named
            rows.append(DeclaredKernel(name, None, dist, dist_version, f"version {raised(exc)}"))
            continue
        rows.append(DeclaredKernel(name, version, dist, dist_version))
    return rows
