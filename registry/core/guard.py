"""The one place the registry catches whatever code it does not own raises.

A kernel plugin's member, an entry point's import, a GPU detector, an observer, one
installed distribution's metadata: each may raise anything, and none may break a serving
call or hide the rest.  Every such call goes through :func:`guarded` (or
:func:`guarded_load`, for an import that may also call ``sys.exit``), which answers the
call's value or a :class:`Raised`; the caller decides what the failure means (reported
and passed over, a refusal, one typed error).  A kernel family's members are called
through :class:`~flyconfigs.registry.families.family.Family`, which reports each fault with its
origin; nothing else in the registry catches ``Exception``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Raised", "guarded", "guarded_load", "raised"]

T = TypeVar("T")


@dataclass(frozen=True)
class Raised:
    """What a guarded call raised instead of answering."""

    exc: BaseException

    def __str__(self) -> str:
        return raised(self.exc)


def raised(exc: BaseException) -> str:
    """``raised ValueError: first line`` for messages."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"raised {type(exc).__name__}" + (f": {first}" if first else "")


def guarded(call: Callable[..., T], *args: object) -> T | Raised:
    """``call(*args)``, or what it raised (any :class:`Exception`) as a :class:`Raised`."""
    try:
        return call(*args)
    except Exception as exc:  # noqa: BLE001 - code the registry does not own: its failure is the caller's to judge
        return Raised(exc)


def guarded_load(load: Callable[[], T]) -> T | Raised:
    """``load()`` (an entry point's import), or what it raised, ``SystemExit`` included:
    a module that exits on import is one clear error, never the end of the process."""
    try:
        return load()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever a plugin raises on import is one clear error
        return Raised(exc)
