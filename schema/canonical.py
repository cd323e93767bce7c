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

__all__ = ["canonical_bytes", "canonical_text", "content_hash", "same_value", "sha256_hex"]


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


def canonical_text(value: Any) -> str:
    """The canonical JSON of ``value`` as text: a hashable, typed form of keys and
    configs (``true``, ``1`` and ``1.0`` differ, as they do in the file)."""
    kind = type(value)
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
