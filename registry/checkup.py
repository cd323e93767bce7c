"""What is wrong with this environment's configs, as one report: :func:`doctor_report`.

The report reads a resolver (the process-wide one behind :func:`flyconfigs.resolve`
unless another is given) the way its searches read it: the device it would use, the
override directories, the installed data packages, every artifact and table checked by
the rules that decide whether it serves, and every collision between sources.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flyconfigs.registry import declarations
from flyconfigs.registry.core.problems import Problem
from flyconfigs.registry.declarations import check_kernel_choices
from flyconfigs.registry.search.records import Collision
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.registry.sources.entries import PACKAGES_ENV, PackageInfo
from flyconfigs.registry.sources.folders import override_directories

if TYPE_CHECKING:
    from flyconfigs.registry.resolve import Resolver

__all__ = ["DoctorReport", "Predicted", "doctor_report"]


@dataclass(frozen=True)
class Predicted:
    """How many of ``kernel``'s artifacts (a table's rows counted each) installed for the
    device are predicted (compiled and ranked by a model), not measured on it."""

    kernel: str
    count: int


@dataclass(frozen=True)
class DoctorReport:
    """What :func:`doctor_report` found.

    ``device`` is the device calls are resolved for (``None``: unknown, every call gets
    the default heuristic) and ``device_source`` how it was found, or why it is unknown.
    ``problems`` are problems with the data read (a collision is in ``collisions``, not
    here); ``errors`` say what breaks serving (a collision nobody chose); ``warnings`` what
    makes every call get the default heuristic here, which is no fault of what is
    installed; ``predicted`` the kernels served predicted configs on this device.
    """

    device: DeviceQuery | None
    device_source: str
    override_directories: tuple[Path, ...]
    packages: tuple[PackageInfo, ...]
    problems: tuple[Problem, ...]
    collisions: tuple[Collision, ...]
    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    predicted: tuple[Predicted, ...]

    @property
    def ok(self) -> bool:
        """Whether nothing is wrong with what is installed (warnings aside)."""
        return not self.problems and not self.errors


def doctor_report(resolver: Resolver, device: DeviceQuery | None = None) -> DoctorReport:
    """Check everything ``resolver`` reads (module docstring), for ``device`` (default:
    the device ``resolver`` detects, ``device_source`` saying how).  Bad data is reported,
    never raised."""
    if device is not None:
        how = "given by the caller"
    else:
        device, how = _quietly(resolver.current_device)
    check_kernel_choices(resolver.problems)
    problems = resolver.check_all()
    collisions = resolver.collisions()
    packages = resolver.packages()
    # With the problems of the process-wide kernel table (a resolver's own log holds its own).
    real = [p for p in [*problems, *declarations.PROBLEMS.problems()] if p.kind != "collision"]
    errors = [f"contested: {c.winner} and {', '.join(c.shadowed)} claim {c.kernel} {dict(c.key)} at the same "
              f"precedence, so neither serves it; rank the packages with {PACKAGES_ENV} to choose"
              if c.contested else
              f"unexpected collision: {c.winner} ({c.standings[0]}) shadows {', '.join(c.shadowed)}; "
              f"rank the packages with {PACKAGES_ENV} to choose" for c in collisions if not c.expected]
    warnings = []
    if device is None:
        # Why it is unknown is in device_source: said once.
        warnings.append("no device known (see the device line): every call gets the default heuristic")
    elif not resolver.sources_for(device.arch):
        warnings.append(f"nothing installed serves {device.arch}: every call gets the default heuristic")
    return DoctorReport(device, how, tuple(override_directories()), tuple(packages), tuple(real), tuple(collisions),
                        tuple(errors), tuple(warnings), tuple(_predicted(resolver, device)))


def _quietly(detect: Callable[[], tuple[DeviceQuery | None, str]]) -> tuple[DeviceQuery | None, str]:
    """``detect()`` without the registry's own warning that the GPU is not detected: the
    report says why, once."""

    def drop(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("the GPU is not detected")

    log = logging.getLogger("flyconfigs.registry")
    log.addFilter(drop)
    try:
        return detect()
    finally:
        log.removeFilter(drop)


def _predicted(resolver: Resolver, device: DeviceQuery | None) -> list[Predicted]:
    """For each kernel whose artifacts for ``device`` were predicted, not measured, how
    many (by kernel name)."""
    if device is None:
        return []
    by_kernel: dict[str, int] = {}
    for entry in resolver.all_entries(tables=False):
        if entry.device.arch != device.arch:
            continue
        artifact = entry.load(resolver.problems)
        if artifact is not None and artifact.selection.rule == "predicted" and (
                device.product is None or artifact.device.product == device.product):
            by_kernel[artifact.kernel.name] = by_kernel.get(artifact.kernel.name, 0) + 1
    for ref in resolver.all_tables():  # a table's rows share its selection: counted, not loaded
        table = ref.read(resolver.problems) if ref.device.arch == device.arch else None
        if table is not None and table.selection.rule == "predicted" and (
                device.product is None or table.device.product == device.product):
            by_kernel[table.kernel.name] = by_kernel.get(table.kernel.name, 0) + len(table.rows)
    return [Predicted(kernel, count) for kernel, count in sorted(by_kernel.items())]
