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


def canonical_bytes(value: Any) -> bytes:
    """Return the canonical JSON encoding of ``value``.

    Raises ``ValueError`` for NaN or Infinity and ``TypeError`` for values JSON cannot
    hold.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def content_hash(value: Any) -> str:
    """Hex sha256 of the canonical bytes of ``value``."""
    return sha256_hex(canonical_bytes(value))


def canonical_text(value: Any) -> str:
    """The canonical JSON of ``value`` as text: a hashable, typed form of keys and
    configs (``true``, ``1`` and ``1.0`` differ, as they do in the file)."""
    return canonical_bytes(value).decode("utf-8")


def same_value(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same JSON value, types included (Python's ``==``
    says ``True == 1 == 1.0``; a key or config never does)."""
    return a == b and canonical_bytes(a) == canonical_bytes(b)
