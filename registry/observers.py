"""Who hears of every resolution: a resolver's observers (:class:`Observed`, mixed into
:class:`~flyconfigs.registry.resolve.Resolver`).  An observer that raises is reported once
and never breaks a resolve."""

from __future__ import annotations

import threading
from collections.abc import Callable

from flyconfigs.registry.core.guard import Raised, guarded
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.search.records import Resolution

__all__ = ["Observed", "Observer"]

Observer = Callable[[Resolution], None]


class Observed:
    """The observers of a resolver, which gives the lock and problem log below."""

    _lock: threading.RLock
    _observers: list[Observer]
    problems: ProblemLog

    def add_observer(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer`` with every resolution (memo hits too); returns a remover.
        An observer that raises is logged once and never breaks a resolve."""
        with self._lock:
            self._observers = [*self._observers, observer]

        def remove() -> None:
            with self._lock:
                self._observers = [o for o in self._observers if o is not observer]

        return remove

    def _notify(self, resolution: Resolution) -> None:
        for observer in self._observers:
            failed = guarded(observer, resolution)  # an observer must not break serving
            if isinstance(failed, Raised):
                self.problems.report(Problem("observer-error", repr(observer),
                                             f"raised {type(failed.exc).__name__}: {failed.exc}; resolve went on"))
