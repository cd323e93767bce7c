"""Keys and values as the command line writes them: ``AXIS=VALUE`` items parsed into a
typed key."""

from __future__ import annotations

import json
import math
import re

from flyconfigs.errors import InvalidKeyError
from flyconfigs.registry.contract import KeyValue

__all__ = ["parse_key_items", "parse_value"]

_INT = re.compile(r"^-?[0-9]{1,18}$")
_NUMERIC = re.compile(r"^[-+0-9.]")
_FLOAT = re.compile(r"^-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,20}([eE][-+]?[0-9]{1,3})?|[eE][-+]?[0-9]{1,3})$")


def parse_value(text: str) -> KeyValue:
    """A key or grid value from the command line.  ASCII digits (with an optional leading
    ``-``, at most 18 of them) are an int; a JSON number with a fraction or exponent a
    float; ``true``, ``false`` and ``null`` those values; text in ``[…]``, ``{…}`` or
    ``"…"`` is parsed as JSON (a list such as a tensor shape, an object, a string that
    would otherwise read as something else); any other name is a string.  A value that
    looks numeric but is none of these is refused (``--5``, ``1_000``, ``²``)."""
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        value = float(text)
        if not math.isfinite(value):
            raise InvalidKeyError(f"value {text!r} is not a finite number")
        return value
    if text in ("true", "false", "null"):
        return json.loads(text)
    if text[:1] in ('[', '{', '"'):
        try:
            return json.loads(text, parse_constant=_no_constant)
        except ValueError as exc:
            raise InvalidKeyError(f"value {text!r} is not valid JSON: {exc}") from None
    if not text.isascii() or _NUMERIC.match(text) or any(c.isdigit() and not c.isascii() for c in text):
        raise InvalidKeyError(
            f"value {text!r} is neither an int of at most 18 ASCII digits, a finite float, true, false, null, "
            'JSON in [], {} or "", nor a name'
        )
    return text


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a finite number")


def parse_key_items(items: list[str] | tuple[str, ...]) -> dict[str, KeyValue]:
    """``["M=4096", "dtype=bf16"]`` → a key; :class:`InvalidKeyError` for an item that is
    not ``NAME=VALUE``, a bad value, or an axis given twice."""
    key: dict[str, KeyValue] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise InvalidKeyError(f"key item {item!r} is not NAME=VALUE")
        if name in key:
            raise InvalidKeyError(f"key axis {name!r} is given twice")
        key[name] = parse_value(value)
    return key

