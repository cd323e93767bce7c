"""One snapshot of what the registry reads from outside the process: the settings
(:mod:`flyconfigs.registry.core.settings`) and the entry points of every ``flyconfigs.*``
group, found by one scan of the installed distributions
(:func:`~flyconfigs.registry.core.entrypoints.scan_entry_points`).

Each resolver's kernel table holds one (:attr:`KernelRecords.environment
<flyconfigs.registry.families.loaded.KernelRecords>`) and replaces it on
:meth:`~flyconfigs.registry.Resolver.refresh`; the kernel records, the catalog of data
packages and the GPU detector all read from it.  Each part is read when first needed,
so a resolver made before the environment is set up sees it as it is at first use.
"""

from __future__ import annotations

import threading

from flyconfigs.registry.core.entrypoints import EntryPointScan, FoundEntryPoint, scan_entry_points
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.core.settings import Settings, read_settings

__all__ = ["Environment"]


class Environment:
    """The settings and the entry points, each read once, when first asked for."""

    def __init__(self) -> None:
        self._settings: Settings | None = None
        self._scan: EntryPointScan | None = None
        self._lock = threading.Lock()

    @property
    def settings(self) -> Settings:
        """The ``FLYCONFIGS_*`` settings, read at the first call."""
        with self._lock:
            if self._settings is None:
                self._settings = read_settings()
            return self._settings

    def entry_points(self, group: str, problems: ProblemLog) -> list[FoundEntryPoint]:
        """Every entry point of ``group`` (a ``flyconfigs.*`` group), in ``sys.path``
        order, one distribution per name, as :func:`~flyconfigs.registry.core.entrypoints.find_entry_points`
        finds them; the distributions are scanned at the first call only, and what is
        wrong with one is reported to ``problems`` at every call that it concerns."""
        with self._lock:
            if self._scan is None:
                self._scan = scan_entry_points()
            scan = self._scan
        return scan.select(group, problems)
