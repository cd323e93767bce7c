"""What a resolver's memos may remember and how much: a call's key remembered as given
only when its values compare as JSON does, and memos bounded to :data:`MEMO_LIMIT`
entries, the oldest dropped first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

__all__ = ["MEMO_LIMIT", "PLAIN", "UNHASHABLE", "bounded_put", "call_as_given", "plain"]

V = TypeVar("V")

MEMO_LIMIT = 16384
"""Memoized resolutions kept per resolver; the oldest is dropped first beyond it."""

PLAIN = frozenset({int, str, bool, type(None)})
"""Key value types whose Python equality is JSON equality (a float's is not: ``-0.0``)."""

UNHASHABLE: list[object] = []
"""Stands for any other value in a memo key, so that hashing it sends the key to the
canonical form."""


def plain(key: Mapping[str, object]) -> bool:
    """Whether every value of ``key`` is an int, str, bool or None: values whose Python
    equality is their identity as JSON.  Only such keys enter the as-given memos (a float
    would find ``0.0``'s answer for ``-0.0``)."""
    return all(v.__class__ in PLAIN for v in key.values())


def call_as_given(kernel: str, key: Mapping[str, object], device: object) -> tuple[object, ...]:
    """A call by a kernel's name as given: the name, the key's names and values in the
    caller's order with each value's type, and the device (hashing it raises
    :class:`TypeError` when something in it cannot be hashed); :class:`AttributeError`
    for a key that is not a mapping."""
    values = key.values()
    return (kernel, device, *key, *values, *map(type, values))


def bounded_put(memo: dict[tuple[object, ...], V], key: tuple[object, ...], value: V) -> None:
    """``memo[key] = value``, dropping the oldest entry first when it holds ``MEMO_LIMIT``."""
    if len(memo) >= MEMO_LIMIT:
        memo.pop(next(iter(memo)))
    memo[key] = value
