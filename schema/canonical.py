"""Canonical JSON: the one byte form every hash and every written file uses.

Canonical bytes are UTF-8 JSON with object keys sorted, no insignificant whitespace
(separators ``","`` and ``":"``), non-ASCII characters kept as they are, and NaN and
Infinity refused.  The same value always gives the same bytes, on any machine, so the
sha256 of those bytes (:func:`content_hash`) is a stable identity.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["TextedDict", "canonical_bytes", "key_texts", "canonical_text", "content_hash", "same_value", "sha256_hex"]


_ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
"""``json.dumps`` with the canonical options, built once: ``json.dumps`` makes a new encoder
on every call that passes options, which dominated indexing tables of thousands of keys."""
_STRING = json.encoder.encode_basestring


def canonical_bytes(value: Any) -> bytes:
    """Return the canonical JSON encoding of ``value``.

    Raises ``ValueError`` for NaN or Infinity and ``TypeError`` for values JSON cannot
    hold.
    """
    return canonical_text(value).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def content_hash(value: Any) -> str:
    """Hex sha256 of the canonical bytes of ``value``."""
    return sha256_hex(canonical_bytes(value))


class TextedDict(dict[str, Any]):
    """A dict that carries its canonical text, computed when it is made: the keys of a
    table's thousands of rows, whose text the registry asks for several times while it
    indexes them.  Never changed once made (the text would no longer be its own)."""

    __slots__ = ("text",)

    def __init__(self, items: Any, text: str | None = None) -> None:
        """``text``, when given, must be the canonical text of ``items`` (see
        :func:`key_texts`, which makes many at once)."""
        super().__init__(items)
        self.text = canonical_text(dict(self)) if text is None else text


def key_texts(names: list[str], rows: list[list[Any]]) -> list[str]:
    """The canonical text of ``dict(zip(names, row))`` for each row (the cells of ``names``
    first in each row), made together: the names are sorted and written once."""
    order = sorted(range(len(names)), key=lambda i: names[i])
    heads = [("{" if n == 0 else ",") + _STRING(names[i]) + ":" for n, i in enumerate(order)]
    texts = []
    for row in rows:
        parts = []
        for head, i in zip(heads, order, strict=True):
            cell = row[i]
            of = type(cell)
            parts.append(head + (_STRING(cell) if of is str else int.__repr__(cell) if of is int else canonical_text(cell)))
        texts.append("".join(parts) + "}")
    return texts


def canonical_text(value: Any) -> str:
    """The canonical JSON of ``value`` as text: a hashable, typed form of keys and
    configs (``true``, ``1`` and ``1.0`` differ, as they do in the file)."""
    kind = type(value)
    if kind is TextedDict:
        return value.text  # type: ignore[no-any-return]
    # Scalars, the cells of every key, written as the encoder writes them, without it.
    if kind is str:
        return _STRING(value)
    if kind is int:
        return int.__repr__(value)
    if kind is dict:
        # A key of names and sizes, the most common thing indexed: the same text, built directly.
        parts = []
        for name, item in sorted(value.items()):
            of = type(item)
            if type(name) is not str or (of is not str and of is not int):
                return _ENCODE(value)
            parts.append(_STRING(name) + ":" + (_STRING(item) if of is str else int.__repr__(item)))
        return "{" + ",".join(parts) + "}"
    return _ENCODE(value)


def same_value(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same JSON value, types included (Python's ``==``
    says ``True == 1 == 1.0``; a key or config never does)."""
    return a == b and canonical_bytes(a) == canonical_bytes(b)
