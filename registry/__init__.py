"""flyconfigs.registry: discovery, resolution, fallback and explanation.

The module-level functions use one process-wide :class:`Resolver`; see
:mod:`flyconfigs.registry.resolve` for the precedence rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from flyconfigs.registry.core.problems import Problem
from flyconfigs.registry.declarations import (
    KernelDecl,
    KeyAxis,
    kernel_declaration,
    normalize_key,
    register_kernel,
    unregister_kernel,
)
from flyconfigs.registry.families.loaded import RECORDS
from flyconfigs.registry.resolve import Collision, Resolution, Resolver, Step
from flyconfigs.registry.sources.device import DeviceQuery, parse_device_spec
from flyconfigs.registry.sources.entries import ARTIFACT_GROUP, PATH_ENV, PackageInfo
from flyconfigs.schema.models import DeviceIdentity

__all__ = [
    "ARTIFACT_GROUP",
    "PATH_ENV",
    "Collision",
    "DeviceQuery",
    "KernelDecl",
    "KeyAxis",
    "PackageInfo",
    "Problem",
    "Resolution",
    "Resolver",
    "Step",
    "add_observer",
    "default_resolver",
    "explain",
    "kernel_declaration",
    "normalize_key",
    "parse_device_spec",
    "refresh",
    "register_kernel",
    "resolve",
    "unregister_kernel",
]

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


def add_observer(observer: Callable[[Resolution], None]) -> Callable[[], None]:
    """Observe every resolution; returns a function that removes the observer."""
    return _DEFAULT.add_observer(observer)
