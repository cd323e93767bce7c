"""Entry points of installed distributions, read so that no distribution can break it.

:func:`importlib.metadata.entry_points` raises out of the whole scan when any one
installed distribution has a malformed ``entry_points.txt`` (a line without ``=``), and
an unreadable ``.dist-info`` simply vanishes; an ``entry_points.txt`` that is a FIFO or
``/dev/zero`` blocks it forever.  :func:`find_entry_points` reads the same metadata one
distribution at a time, with the same de-duplication (the first distribution of a name
on ``sys.path`` wins), looks at each metadata file with ``stat`` before anything reads it
(:mod:`flyconfigs.schema.distfiles`), reports each broken distribution as a
:class:`~flyconfigs.registry.problems.Problem` naming its folder, and goes on.  It never
imports a distribution's code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata

from flyconfigs.registry.names import canonical_name
from flyconfigs.registry.problems import Problem, ProblemLog
from flyconfigs.schema.distfiles import METADATA_LIMITS, metadata_file_problem

__all__ = ["FoundEntryPoint", "distribution_folder", "find_entry_points"]


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


def find_entry_points(group: str, problems: ProblemLog) -> list[FoundEntryPoint]:
    """Every entry point of ``group``, in ``sys.path`` order, one distribution per name.

    A distribution whose entry points or metadata cannot be read, or would block or
    never end if read, is reported (``bad-distribution``) and skipped; the others are
    still found."""
    found: list[FoundEntryPoint] = []
    seen: set[str] = set()
    for dist in metadata.distributions():
        # Before anything reads them: a FIFO would block the read, /dev/zero never end it.
        unsafe = next(filter(None, (metadata_file_problem(dist, name) for name in METADATA_LIMITS)), None)
        if unsafe is not None:
            problems.report(Problem("bad-distribution", distribution_folder(dist), f"skipped: {unsafe}"))
            continue
        folder = None
        key = getattr(dist, "_normalized_name", None)
        if key is None:
            name = dist.metadata["Name"]
            key = canonical_name(name) if name else distribution_folder(dist)

        if key in seen:
            continue
        seen.add(key)
        try:
            entry_points = dist.entry_points
            if not entry_points:
                # Empty also when entry_points.txt exists but cannot be read: say so.
                folder = distribution_folder(dist)
                if os.path.lexists(os.path.join(folder, "entry_points.txt")) and dist.read_text("entry_points.txt") is None:
                    raise OSError("entry_points.txt cannot be read")
                continue
            selected = list(entry_points.select(group=group))
            if not selected:
                continue
            # Asked once: Distribution.metadata parses the file (a long description
            # and all) each time.
            name = dist.metadata["Name"]
            if not name:
                raise OSError("its METADATA cannot be read or names no distribution")
            claimed = _claims_another_name(dist, key, name)
            if claimed is not None:
                # A standing follows a name (flyconfigs, flyconfigs-<target>): a
                # distribution may not take one its own install folder does not bear.
                raise OSError(f"its METADATA names {claimed!r}, but its folder is {key!r}")
            version = dist.version
        except Exception as exc:  # noqa: BLE001 - one broken distribution must not hide the rest
            folder = folder or distribution_folder(dist)
            problems.report(Problem("bad-distribution", folder, f"skipped: {type(exc).__name__}: {exc}"))
            continue
        for ep in selected:
            found.append(FoundEntryPoint(ep, dist, name, version))
    return found
