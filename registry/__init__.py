"""flyconfigs.registry: discovery, resolution, fallback and explanation.

The module-level functions use one process-wide :class:`Resolver`; the order of
preference is :func:`flyconfigs.registry.search.preference.rank_key`'s docstring, and
``docs/architecture.md`` shows the rooms of this package.  Checking what is installed
and what a file holds are reports: :func:`doctor` (a :class:`DoctorReport`) and
:func:`validate_path` (a :class:`ValidationReport`), which ``flyconfigs doctor`` and
``flyconfigs validate`` render.  The names in ``__all__`` are the registry's public face,
all the command line imports of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.declarations import (
    DeclaredKernel,
    KernelDecl,
    KeyAxis,
    declared_kernels,
    kernel_declaration,
    normalize_key,
    parse_spelled_items,
    register_kernel,
    unregister_kernel,
)
from flyconfigs.registry.families.loaded import RECORDS
from flyconfigs.registry.resolve import Collision, Resolution, Resolver, Step
from flyconfigs.registry.sources.device import DEVICE_ENV, DeviceQuery, parse_device_spec
from flyconfigs.registry.sources.entries import ARTIFACT_GROUP, PACKAGES_ENV, PATH_ENV, PackageInfo
from flyconfigs.schema.models import DeviceIdentity

if TYPE_CHECKING:
    from flyconfigs.registry.checks.kernel_schema import kernel_artifact_schema
    from flyconfigs.registry.checks.replacing import replacement_refusal
    from flyconfigs.registry.checkup import DoctorReport, Predicted
    from flyconfigs.registry.core.products import find_product, product_catalog
    from flyconfigs.registry.installed import installed_tables
    from flyconfigs.registry.validation import FileValidation, ValidationReport, validate_path

__all__ = [
    "ARTIFACT_GROUP",
    "DEVICE_ENV",
    "PACKAGES_ENV",
    "PATH_ENV",
    "Collision",
    "DeclaredKernel",
    "DeviceQuery",
    "DoctorReport",
    "FileValidation",
    "KernelDecl",
    "KeyAxis",
    "PackageInfo",
    "Predicted",
    "Problem",
    "ProblemLog",
    "Resolution",
    "Resolver",
    "Step",
    "ValidationReport",
    "add_observer",
    "declared_kernels",
    "default_resolver",
    "doctor",
    "explain",
    "find_product",
    "installed_tables",
    "kernel_artifact_schema",
    "kernel_declaration",
    "normalize_key",
    "parse_device_spec",
    "parse_spelled_items",
    "product_catalog",
    "refresh",
    "register_kernel",
    "replacement_refusal",
    "resolve",
    "unregister_kernel",
    "validate_path",
]

_LAZY = {
    "DoctorReport": "flyconfigs.registry.checkup",
    "Predicted": "flyconfigs.registry.checkup",
    "FileValidation": "flyconfigs.registry.validation",
    "ValidationReport": "flyconfigs.registry.validation",
    "validate_path": "flyconfigs.registry.validation",
    "find_product": "flyconfigs.registry.core.products",
    "product_catalog": "flyconfigs.registry.core.products",
    "installed_tables": "flyconfigs.registry.installed",
    "kernel_artifact_schema": "flyconfigs.registry.checks.kernel_schema",
    "replacement_refusal": "flyconfigs.registry.checks.replacing",
}
"""Names of the public face whose modules are imported when first used: the loader's
first resolve reads none of them."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flyconfigs.registry' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

_DEFAULT = Resolver(kernels=RECORDS)


def default_resolver() -> Resolver:
    """The process-wide resolver behind :func:`resolve`."""
    return _DEFAULT


def resolve(
    kernel: str | KernelDecl, key: Mapping[str, object], device: DeviceIdentity | DeviceQuery | str | None = None
) -> Resolution:
    """The config for ``kernel`` at ``key`` on ``device`` and where it came from.

    See :meth:`Resolver.resolve`.
    """
    return _DEFAULT.resolve(kernel, key, device)


def explain(
    kernel: str | KernelDecl, key: Mapping[str, object], device: DeviceIdentity | DeviceQuery | str | None = None
) -> tuple[Resolution, list[Step]]:
    """Resolve and return the steps taken; see :meth:`Resolver.explain`."""
    return _DEFAULT.explain(kernel, key, device)


def refresh() -> None:
    """Drop the process-wide caches (memo, index, device)."""
    _DEFAULT.refresh()


def doctor(device: DeviceQuery | None = None, resolver: Resolver | None = None) -> DoctorReport:
    """What is wrong with this environment's configs, for ``device`` (default: the
    device ``resolver`` detects), read through ``resolver`` (default: the process-wide
    one): see :func:`flyconfigs.registry.checkup.doctor_report`.  Never raises for bad
    data: it is in the report."""
    from flyconfigs.registry.checkup import doctor_report

    return doctor_report(resolver if resolver is not None else _DEFAULT, device)


def add_observer(observer: Callable[[Resolution], None]) -> Callable[[], None]:
    """Observe every resolution; returns a function that removes the observer."""
    return _DEFAULT.add_observer(observer)
