"""Building many objects at once: the registry's bulk builds (a table's rows read,
indexed and grouped) run with the cyclic garbage collector paused."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

_LOCK = threading.Lock()
_builds = 0
"""The bulk builds running now, in every thread."""
_paused = False
"""Whether the first of them paused the collector (it was running then)."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a table's rows are read and indexed, then
    resumed as it was.  Those rows are hundreds of thousands of new objects that all live
    on, and none of them is garbage: each collection they set off walks all of them for
    nothing, and at the size of aiter's tables that was a third of a first resolve.

    Builds nest and may run in several threads at once (a catalog's tables are built
    without a lock): the first to begin pauses the collector if it was running, and the
    last to end resumes it, so that no build ends the pause under another one; a collector
    the caller had paused stays paused."""
    global _builds, _paused
    with _LOCK:
        if _builds == 0:
            _paused = gc.isenabled()
            if _paused:
                gc.disable()
        _builds += 1
    try:
        yield
    finally:
        with _LOCK:
            _builds -= 1
            if _builds == 0 and _paused:
                _paused = False
                gc.enable()
