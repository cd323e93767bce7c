"""Everything a kernel plugin imports from the registry, in one module.

A kernel family is declared by a subclass of :class:`KernelDecl` (its name, family
version, key axes, default heuristic and the optional members of the contract), published
through the entry-point group ``flyconfigs.kernels`` or registered in this process with
:func:`register_kernel`.  Its members meet the registry's types here: the device a call
is for (:class:`DeviceQuery`), a tie of equally near keys (:class:`Tie`, and
:func:`file_order`, a framework file's order), a neighbour offered to its neighbourhood
rule (:class:`Neighbour`, :func:`config_token`).  The functions below call a declaration's
members as the registry does (a member that raises is reported once and never breaks a
serving call; see :class:`~flyconfigs.registry.families.family.Family`), for a plugin that checks
its own configs or asks another family.

The tuner's members (:class:`~flyconfigs.kernels.plugin.TunableKernel`, which needs the
GPU layer's types) are in :mod:`flyconfigs.kernels.plugin`, which re-exports this module's
names: a tunable family imports that one module.  ``docs/plugins.md`` says where each
member runs.
"""

from __future__ import annotations

from collections.abc import Mapping

from flyconfigs.registry.checks.check import refusal
from flyconfigs.registry.core.problems import ProblemLog
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
from flyconfigs.registry.families.family import Family
from flyconfigs.registry.families.loaded import RECORDS, register_kernel, unregister_kernel
from flyconfigs.registry.families.nearest import log_distance
from flyconfigs.registry.families.tunables import check_tunables
from flyconfigs.registry.search.neighbourhood import Neighbour, config_token
from flyconfigs.registry.search.ties import Tie, file_order
from flyconfigs.registry.sources.device import DEVICE_ARGUMENT, DeviceQuery, as_query

__all__ = [
    "DEVICE_ARGUMENT",
    "NAME_PATTERN",
    "Default",
    "DeviceMatch",
    "DeviceQuery",
    "KernelDecl",
    "KeyAxis",
    "KeyValue",
    "Neighbour",
    "SourceBinding",
    "SpelledKey",
    "Tie",
    "TunableVariants",
    "as_query",
    "check_config",
    "check_key",
    "check_tunables",
    "default_config",
    "device_match",
    "file_order",
    "kernel_declaration",
    "log_distance",
    "normalize_key",
    "own_check_config",
    "refusal",
    "register_kernel",
    "report_fault",
    "config_token",
    "spelled_key",
    "unregister_kernel",
]


def kernel_declaration(kernel: object, problems: ProblemLog | None = None) -> KernelDecl:
    """The declaration of ``kernel`` (a name, or a declaration returned as is).

    Raises :class:`~flyconfigs.errors.UnknownKernelError` naming the kernels that are
    declared, or saying why a declared one cannot be loaded;
    :class:`~flyconfigs.errors.AmbiguousKernelError` when several distributions declare
    the name and none was chosen; :class:`~flyconfigs.errors.KernelPluginError` naming
    the distribution when the declaration's ``name`` (or another required member) raises.
    """
    return RECORDS.record(kernel, problems).decl


def check_key(decl: KernelDecl, key: object, problems: ProblemLog | None = None) -> dict[str, KeyValue]:
    """``key`` checked by the kernel's own ``check_key`` (:class:`~flyconfigs.errors.InvalidKeyError`
    for what it refuses); see :meth:`Family.check_key <flyconfigs.registry.families.family.Family.check_key>`."""
    return Family.of_declaration(decl, problems).check_key(key)


def spelled_key(decl: KernelDecl, key: object, device: DeviceQuery | None,
                problems: ProblemLog | None = None) -> SpelledKey:
    """``key`` as the kernel reads its users' spelling; see :meth:`Family.spelled_key
    <flyconfigs.registry.families.family.Family.spelled_key>`."""
    return Family.of_declaration(decl, problems).spelled_key(key, device)


def default_config(decl: KernelDecl, key: Mapping[str, KeyValue], device: DeviceQuery | None,
                   problems: ProblemLog | None = None) -> dict[str, KeyValue]:
    """The kernel's default heuristic for ``key`` on ``device``, as a plain dict; one that
    raises or answers anything but a mapping is reported once and raised as
    :class:`~flyconfigs.errors.KernelPluginError` naming the kernel, its distribution and
    the member."""
    return Family.of_declaration(decl, problems).default(key, device)


def check_config(decl: KernelDecl, config: object, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> str | None:
    """Why ``config`` cannot be served for ``key`` on ``device``, or ``None`` when the
    kernel accepts it: first its declared tunables (:func:`check_tunables`), then the
    family's own ``check_config``.  A check that raises counts as a refusal (with what it
    raised)."""
    return Family.of_declaration(decl).check_config(config, key, device)


def own_check_config(decl: KernelDecl, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
    """The family's own ``check_config`` alone, for a config whose tunables were checked."""
    return Family.of_declaration(decl).own_check_config(config, key, device)


def device_match(decl: KernelDecl, problems: ProblemLog | None = None) -> DeviceMatch:
    """``decl.device_match`` checked (``product`` where it fails, reported once)."""
    return Family.of_declaration(decl, problems).device_match


def report_fault(decl: KernelDecl, member: str, exc: BaseException, consequence: str,
                 problems: ProblemLog | None) -> None:
    """Log a member of ``decl`` raising, once per declaration and member in ``problems``
    (default: the process-wide table's log), naming the origin that log's resolver knows."""
    Family.of_declaration(decl, problems).fault(member, exc, consequence)
