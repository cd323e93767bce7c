"""Problems with the data the registry reads, each logged once.

Bad data never raises out of a resolve: it becomes a :class:`Problem`, logged through
``logging`` the first time it is seen (not per call), kept for ``flyconfigs doctor``,
and the resolution falls back past it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["Origins", "Problem", "ProblemKind", "ProblemLog"]

logger = logging.getLogger("flyconfigs.registry")

ProblemKind = Literal[
    "invalid-artifact",
    "unsupported-major",
    "hash-mismatch",
    "missing-file",
    "unsafe-path",
    "identity-mismatch",
    "invalid-manifest",
    "wrong-target",
    "collision",
    "bad-device",
    "bad-distribution",
    "kernel-collision",
    "kernel-error",
    "kernel-name-clash",
    "invalid-config",
    "invalid-key",
    "stale-artifact",
    "unreadable-source",
    "test-double",
    "observer-error",
    "detector-collision",
    "detector-choice",
    "bad-setting",
    "duplicate",
]


@dataclass(frozen=True)
class Problem:
    """One distinct problem: its kind, the file (or setting) it is in, and what is wrong."""

    kind: ProblemKind
    where: str
    message: str
    distribution: str | None = None

    def __str__(self) -> str:
        origin = f" (from {self.distribution})" if self.distribution else ""
        return f"{self.kind}: {self.where}{origin}: {self.message}"


Origins = Callable[[object], "tuple[str, str | None]"]
"""Where a kernel declaration came from, for messages, and its distribution when known."""


class ProblemLog:
    """Records problems; logs each distinct one once, at ``level`` unless it is a collision
    an override directory was meant to make (logged at INFO).

    A resolver's log also holds its **fault set** (``faults``: the kernel plugin members
    already reported as raising, by declaration and member) and the lookup that names a
    declaration's origin in that resolver's own kernel records (``origins``): a new log,
    as :meth:`~flyconfigs.registry.Resolver.refresh` makes, reports each fault once more,
    and no other resolver's log is touched."""

    def __init__(self, origins: Origins | None = None) -> None:
        self._seen: dict[Problem, None] = {}
        self._lock = threading.Lock()
        self.faults: set[tuple[int, str]] = set()
        self.origins = origins

    def first_fault(self, decl: object, member: str) -> bool:
        """Whether ``decl``'s ``member`` is reported faulty here for the first time (then
        it is remembered: later calls answer ``False``)."""
        with self._lock:
            if (id(decl), member) in self.faults:
                return False
            self.faults.add((id(decl), member))
            return True

    def report(self, problem: Problem, level: int = logging.WARNING) -> None:
        """Record ``problem``; log it if it is new."""
        with self._lock:
            if problem in self._seen:
                return
            self._seen[problem] = None
        logger.log(level, "%s", problem)

    def problems(self) -> list[Problem]:
        """Every problem recorded so far, in the order first seen."""
        with self._lock:
            return list(self._seen)
