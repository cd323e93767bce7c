"""Entry points of installed distributions, read so that no distribution can break it.

:func:`importlib.metadata.entry_points` raises out of the whole scan when any one
installed distribution has a malformed ``entry_points.txt`` (a line without ``=``), and
an unreadable ``.dist-info`` simply vanishes; an ``entry_points.txt`` that is a FIFO or
``/dev/zero`` blocks it forever.  :func:`find_entry_points` reads the same metadata one
distribution at a time, in one pass for every ``flyconfigs.*`` group
(:func:`scan_entry_points`), with the same de-duplication (the first distribution of a name
on ``sys.path`` wins), looks at each metadata file with ``stat`` before anything reads it
(:mod:`flyconfigs.schema.distfiles`), reports each broken distribution as a
:class:`~flyconfigs.registry.core.problems.Problem` naming its folder, and goes on.  It never
imports a distribution's code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata

from flyconfigs.registry.core.guard import Raised, guarded
from flyconfigs.registry.core.names import canonical_name
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.schema.distfiles import METADATA_LIMITS, metadata_file_problem

__all__ = ["GROUP_PREFIX", "EntryPointScan", "FoundEntryPoint", "distribution_folder", "find_entry_points",
           "scan_entry_points"]


@dataclass(frozen=True)
class FoundEntryPoint:
    """An entry point and the distribution that declares it."""

    entry_point: metadata.EntryPoint
    dist: metadata.Distribution
    distribution: str
    """The distribution's name as its metadata spells it."""
    version: str


def distribution_folder(dist: metadata.Distribution) -> str:
    """Where ``dist``'s metadata lives, for messages."""
    return str(getattr(dist, "_path", "") or dist.locate_file(""))


def _claims_another_name(dist: metadata.Distribution, folder_name: str, name: str) -> str | None:
    """The name ``dist``'s METADATA gives (``name``) when it is not the one its
    ``.dist-info`` folder is named for (pip always writes them alike), else ``None``."""
    if not str(getattr(dist, "_path", "")).endswith(".dist-info"):
        return None
    if name and canonical_name(name).replace("-", "_") != folder_name.replace("-", "_"):
        return str(name)
    return None


GROUP_PREFIX = "flyconfigs."
"""The entry-point groups a scan keeps: every group the registry reads starts so."""


@dataclass(frozen=True)
class EntryPointScan:
    """What one pass over the installed distributions found: the entry points of every
    ``flyconfigs.*`` group, and each broken distribution's problem with the groups it
    concerns (``None``: every group, as when its entry points cannot be read at all)."""

    found: dict[str, list[FoundEntryPoint]]
    problems: list[tuple[frozenset[str] | None, Problem]]

    def select(self, group: str, problems: ProblemLog) -> list[FoundEntryPoint]:
        """The entry points of ``group``; the problems that concern it reported to ``problems``."""
        for groups, problem in self.problems:
            if groups is None or group in groups:
                problems.report(problem)
        return list(self.found.get(group, ()))


def scan_entry_points() -> EntryPointScan:
    """One pass over the installed distributions (:func:`importlib.metadata.distributions`
    is asked once) collecting the entry points of every ``flyconfigs.*`` group, in
    ``sys.path`` order, one distribution per name.

    A distribution whose entry points or metadata cannot be read, or would block or
    never end if read, is recorded as a ``bad-distribution`` problem and skipped; the
    others are still found."""
    found: dict[str, list[FoundEntryPoint]] = {}
    problems: list[tuple[frozenset[str] | None, Problem]] = []
    seen: set[str] = set()
    for dist in metadata.distributions():
        # Before anything reads them: a FIFO would block the read, /dev/zero never end it.
        unsafe = next(filter(None, (metadata_file_problem(dist, name) for name in METADATA_LIMITS)), None)
        if unsafe is not None:
            problems.append((None, Problem("bad-distribution", distribution_folder(dist), f"skipped: {unsafe}")))
            continue
        key = getattr(dist, "_normalized_name", None)
        if key is None:
            name = dist.metadata["Name"]
            key = canonical_name(name) if name else distribution_folder(dist)

        if key in seen:
            continue
        seen.add(key)
        groups: list[frozenset[str] | None] = [None]
        read = guarded(_read_entry_points, dist, key, groups)  # one broken distribution must not hide the rest
        if isinstance(read, Raised):
            exc = read.exc
            problems.append((groups[0], Problem("bad-distribution", distribution_folder(dist),
                                                f"skipped: {type(exc).__name__}: {exc}")))
            continue
        if read is None:
            continue
        selected, name, version = read
        for ep in selected:
            found.setdefault(ep.group, []).append(FoundEntryPoint(ep, dist, name, version))
    return EntryPointScan(found, problems)


def _read_entry_points(dist: metadata.Distribution, key: str,
                       groups: list[frozenset[str] | None]) -> tuple[list[metadata.EntryPoint], str, str] | None:
    """``dist``'s entry points of the ``flyconfigs.*`` groups, its name and version, or
    ``None`` when it has none; raises what reading its metadata raises (``groups[0]``
    then says which groups the failure concerns, once they are known)."""
    entry_points = dist.entry_points
    if not entry_points:
        # Empty also when entry_points.txt exists but cannot be read: say so.
        folder = distribution_folder(dist)
        if os.path.lexists(os.path.join(folder, "entry_points.txt")) and dist.read_text("entry_points.txt") is None:
            raise OSError("entry_points.txt cannot be read")
        return None
    selected = [ep for ep in entry_points if ep.group.startswith(GROUP_PREFIX)]
    if not selected:
        return None
    groups[0] = frozenset(ep.group for ep in selected)
    # Asked once: Distribution.metadata parses the file (a long description and all)
    # each time.
    name = dist.metadata["Name"]
    if not name:
        raise OSError("its METADATA cannot be read or names no distribution")
    claimed = _claims_another_name(dist, key, name)
    if claimed is not None:
        # A standing follows a name (flyconfigs, flyconfigs-<target>): a distribution
        # may not take one its own install folder does not bear.
        raise OSError(f"its METADATA names {claimed!r}, but its folder is {key!r}")
    return selected, name, dist.version


def find_entry_points(group: str, problems: ProblemLog) -> list[FoundEntryPoint]:
    """Every entry point of ``group`` (a ``flyconfigs.*`` group), in ``sys.path`` order,
    one distribution per name, from a scan of its own (a resolver's
    :class:`~flyconfigs.registry.core.environment.Environment` scans once for every group).

    A distribution whose entry points or metadata cannot be read, or would block or
    never end if read, is reported (``bad-distribution``) and skipped; the others are
    still found."""
    return scan_entry_points().select(group, problems)
