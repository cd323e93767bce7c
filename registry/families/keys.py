"""Keys and values as the command line writes them: ``AXIS=VALUE`` items parsed into a
typed key."""

from __future__ import annotations

import json
import math
import re

from flyconfigs.errors import InvalidKeyError
from flyconfigs.registry.core.axes import KeyValue

__all__ = ["parse_key_items", "parse_spelled_items", "parse_value", "split_spelled_items"]

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



_FLAGGED = re.compile(r"^(\[.*\])_([A-Za-z][A-Za-z0-9]*)$")


def split_spelled_items(items: list[str] | tuple[str, ...]) -> list[str]:
    """``AXIS=VALUE`` items as a user may paste them: an item may hold several joined by
    commas outside brackets and quotes, as a file name does
    (``E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3,block_shape=[128,128]_down.json``
    is four items and a flag); a final ``.json`` is dropped, and a bracketed value
    followed by ``_NAME`` (vLLM's ``[128,128]_down``) becomes the value and the item
    ``NAME=true``."""
    out: list[str] = []
    for item in items:
        pieces: list[str] = []
        depth, quoted, start = 0, False, 0
        for i, c in enumerate(item):
            if c == '"':
                quoted = not quoted
            elif not quoted and c in "[{":
                depth += 1
            elif not quoted and c in "]}":
                depth -= 1
            elif not quoted and depth == 0 and c == ",":
                pieces.append(item[start:i])
                start = i + 1
        pieces.append(item[start:])
        if len(pieces) > 1 or item.endswith(".json"):
            pieces[-1] = pieces[-1].removesuffix(".json")
        for piece in pieces:
            name, sep, value = piece.partition("=")
            flagged = _FLAGGED.match(value) if sep else None
            if flagged is not None:
                out += [f"{name}={flagged[1]}", f"{flagged[2]}=true"]
            else:
                out.append(piece)
    return out


def parse_spelled_items(items: list[str] | tuple[str, ...]) -> dict[str, KeyValue]:
    """:func:`parse_key_items` of the items :func:`split_spelled_items` finds: a key as a
    user types it, to be made the family's by its
    :meth:`~flyconfigs.registry.families.contract.KernelDecl.spelled_key`."""
    return parse_key_items(split_spelled_items(items))
