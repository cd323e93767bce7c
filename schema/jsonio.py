"""Reading JSON documents safely and writing them atomically.

:func:`parse_document` turns untrusted bytes into plain Python values and refuses what
the artifact rules forbid: documents over :data:`MAX_DOCUMENT_BYTES`, invalid UTF-8 or
JSON, duplicate object keys, NaN and Infinity (also as overflowing literals such as
``1e400``) and nesting deeper than :data:`MAX_DEPTH`.  Every refusal is an
:class:`~flyconfigs.errors.ArtifactError` naming the file and the field path.

The fast path parses with pydantic-core and proves the absence of duplicate keys by
re-encoding in the parsed order: a compact file (what flyconfigs writes) re-encodes to
the same bytes, which it could not if a key had been dropped or a number had
overflowed.  Anything else takes the slow path, which finds the exact problem and its
path.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pydantic_core

from flyconfigs.errors import ArtifactError, FieldProblem

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "check_depth",
    "parse_document",
    "read_document",
    "write_atomic",
]

MAX_DOCUMENT_BYTES = 8 * 1024 * 1024
MAX_DEPTH = 32


class _DuplicateKeys(dict):  # type: ignore[type-arg]
    """A parsed object that had duplicate keys; ``duplicates`` names them."""

    duplicates: list[str]


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        marked = _DuplicateKeys(result)
        seen: set[str] = set()
        marked.duplicates = [k for k, _ in pairs if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
        return marked
    return result


class _NonFinite:
    """Stands in for a NaN or Infinity literal until its path is known."""

    def __init__(self, literal: str) -> None:
        self.literal = literal


def _mark_constant(name: str) -> _NonFinite:
    return _NonFinite(name)


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


def check_depth(value: Any, path: str = "", depth: int = 1, limit: int = MAX_DEPTH) -> list[FieldProblem]:
    """Problems in an already parsed value: nesting beyond ``limit``, duplicate keys
    (objects parsed by the slow path) and non-finite floats; each with its path."""
    problems: list[FieldProblem] = []
    if isinstance(value, _NonFinite):
        return [FieldProblem(path, f"{value.literal} is not allowed (JSON has no NaN or Infinity)")]
    if isinstance(value, float):
        if not math.isfinite(value):
            problems.append(FieldProblem(path, f"number {value!r} is not finite (overflow or NaN)"))
        return problems
    if not isinstance(value, (dict, list)):
        return problems
    if depth > limit:
        return [FieldProblem(path, f"nesting deeper than {limit} levels")]
    if isinstance(value, _DuplicateKeys):
        for key in value.duplicates:
            problems.append(FieldProblem(_join(path, key), "duplicate object key"))
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for part, child in items:
        problems.extend(check_depth(child, _join(path, part), depth + 1, limit))
    return problems


def parse_document(raw: bytes, file: str = "<bytes>") -> Any:
    """Parse ``raw`` as one JSON document under the rules above.

    Raises :class:`ArtifactError` (field ``""`` for whole-document problems).
    """
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ArtifactError(
            file, [FieldProblem("", f"document is {len(raw)} bytes, over the limit of {MAX_DOCUMENT_BYTES}")]
        )
    try:
        value = pydantic_core.from_json(raw, allow_inf_nan=False)
        if pydantic_core.to_json(value) == raw.rstrip(b"\n"):
            return value
    except ValueError:
        pass
    return _parse_slow(raw, file)


def _parse_slow(raw: bytes, file: str) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(file, [FieldProblem("", f"not UTF-8 at byte {exc.start}")]) from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs_hook, parse_constant=_mark_constant)
    except json.JSONDecodeError as exc:
        raise ArtifactError(
            file, [FieldProblem("", f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")]
        ) from None
    except RecursionError:
        raise ArtifactError(file, [FieldProblem("", f"nesting deeper than {MAX_DEPTH} levels")]) from None
    problems = check_depth(value)
    if problems:
        raise ArtifactError(file, problems)
    return value


def read_document(path: str | os.PathLike[str]) -> Any:
    """Read and parse the JSON file at ``path`` (see :func:`parse_document`).

    The size limit is checked before reading, so an oversized file is never loaded.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise ArtifactError(
                str(p), [FieldProblem("", f"file is {size} bytes, over the limit of {MAX_DOCUMENT_BYTES}")]
            )
        raw = p.read_bytes()
    except OSError as exc:
        raise ArtifactError(str(p), [FieldProblem("", f"cannot read: {exc.strerror or exc}")]) from None
    return parse_document(raw, str(p))


def write_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never
    a torn one: a temporary file in the same folder, flushed, then ``os.replace``.
    Concurrent writers of the same path each replace it whole; the last one wins."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target
