"""A kernel's key axes (:class:`KeyAxis`), the name pattern of a kernel or a string key
value, and a key checked against a declaration's axes (:func:`normalize_key`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from flyconfigs.errors import InvalidKeyError

__all__ = ["NAME_PATTERN", "KeyAxis", "KeyValue", "normalize_key"]

KeyValue = Any
"""A key or config value: a JSON value as schema 1.1 allows (``flyconfigs.schema.Value``);
each kernel's declaration says which its axes and tunables take."""
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+:-]{0,63}$")
"""A name (a string key value, a kernel's name), matched whole (``fullmatch``: ``$`` alone
would take ``"bf16\n"``); also the JSON Schema's pattern."""
_JSON_KINDS: dict[type, str] = {int: "an int", str: "a name", bool: "a bool", float: "a finite float", list: "a list"}


@dataclass(frozen=True)
class KeyAxis:
    """One axis of a kernel's key.

    ``kind`` is the JSON type its values take: ``int``, ``str`` (a name), ``bool``,
    ``float`` or ``list`` (a list of scalars, such as a tensor shape); ``nullable``
    admits ``None`` as well.  ``ordinal`` int axes (sizes such as ``M``) may be served
    by the nearest tuned value; other axes never are.  ``choices`` restricts a string
    axis; ``minimum`` and ``maximum`` bound an int axis.
    """

    name: str
    kind: type = int
    ordinal: bool = False
    choices: tuple[str, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None
    nullable: bool = False

    def check(self, kernel: str, value: object) -> None:
        """Raise :class:`InvalidKeyError` naming this axis unless ``value`` fits it."""
        kind = type(value)
        if kind is int and kind is self.kind and (self.minimum is None or value >= self.minimum) and (  # type: ignore[operator]
                self.maximum is None or value <= self.maximum):  # type: ignore[operator]
            return  # the common case, without building the message (a table has many rows)
        where = f"key axis {self.name!r} of {kernel!r}"
        if value is None and self.nullable:
            return
        if type(value) is not self.kind or (isinstance(value, float) and not math.isfinite(value)):
            raise InvalidKeyError(f"{where} must be {_JSON_KINDS.get(self.kind, self.kind.__name__)}, got {value!r}")
        if isinstance(value, int) and not isinstance(value, bool):
            if self.minimum is not None and value < self.minimum:
                raise InvalidKeyError(f"{where} must be >= {self.minimum}, got {value}")
            if self.maximum is not None and value > self.maximum:
                raise InvalidKeyError(f"{where} must be <= {self.maximum}, got {value}")
        elif isinstance(value, str):
            if not NAME_PATTERN.fullmatch(value):
                raise InvalidKeyError(f"{where} must be a name, got {value!r}")
            if self.choices is not None and value not in self.choices:
                raise InvalidKeyError(f"{where} must be one of {', '.join(self.choices)}, got {value!r}")
        elif isinstance(value, list):
            if not all(v is None or type(v) in (bool, int, float, str) for v in value):
                raise InvalidKeyError(f"{where} must be a list of scalars, got {value!r}")


class _Declared(Protocol):
    """What :func:`normalize_key` reads of a declaration."""

    @property
    def name(self) -> str: ...

    @property
    def key_axes(self) -> Sequence[KeyAxis]: ...


def normalize_key(decl: _Declared, key: object) -> dict[str, KeyValue]:
    """``key`` checked against ``decl``'s axes, in the declared axis order.

    Raises :class:`InvalidKeyError` naming the axis and the bad value.
    """
    if not isinstance(key, Mapping):
        raise InvalidKeyError(f"key for {decl.name!r} must be a mapping of axis names to values, got {type(key).__name__}")
    axes = decl.key_axes
    if len(key) == len(axes):
        # The common case, every axis given once: checked in one pass.
        out: dict[str, KeyValue] = {}
        name = decl.name
        for axis in axes:
            if axis.name not in key:
                break
            value = key[axis.name]
            axis.check(name, value)
            out[axis.name] = value
        else:
            return out
    names = [a.name for a in axes]
    missing = [n for n in names if n not in key]
    extra = [k for k in key if k not in names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unknown {', '.join(map(repr, extra))}")
        raise InvalidKeyError(f"key for {decl.name!r}: {'; '.join(parts)} (axes: {', '.join(names)})")
    out = {}
    for axis in axes:
        axis.check(decl.name, key[axis.name])
        out[axis.name] = key[axis.name]
    return out


