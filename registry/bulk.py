"""Building many objects at once: the registry's bulk builds (a table's rows read,
indexed and grouped) run with the cyclic garbage collector paused."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["bulk_allocation"]


@contextmanager
def bulk_allocation() -> Iterator[None]:
    """The cyclic garbage collector paused while a table's rows are read and indexed, then
    resumed as it was.  Those rows are hundreds of thousands of new objects that all live
    on, and none of them is garbage: each collection they set off walks all of them for
    nothing, and at the size of aiter's tables that was a third of a first resolve."""
    if not gc.isenabled():  # paused already (an enclosing build, or the caller's choice)
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
