"""Reading JSON documents safely and writing them atomically.

:func:`parse_document` turns untrusted bytes into plain Python values and refuses what
the artifact rules forbid: documents over :data:`MAX_DOCUMENT_BYTES`, invalid UTF-8 or
JSON, duplicate object keys, NaN and Infinity (also as overflowing literals such as
``1e400``), integers Python will not convert from text (more digits than
``sys.get_int_max_str_digits()``, 4300 by default) and nesting deeper than
:data:`MAX_DEPTH`.  Every refusal is an
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
import re
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic_core

from flyconfigs.errors import ArtifactError, FieldProblem

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "check_depth",
    "json_files_under",
    "json_paths_under",
    "parse_document",
    "read_document",
    "read_file_bytes",
    "remove_stale_temporaries",
    "stage_atomic",
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


class _LongInteger:
    """Stands in for an integer literal Python refuses to convert, until its path is known."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _parse_int(text: str) -> int | _LongInteger:
    try:
        return int(text)
    except ValueError:
        # Python's int-string conversion limit (CVE-2020-10735): json.loads would raise a
        # bare ValueError out of the whole parse; mark it so the problem gets its path.
        return _LongInteger(len(text.lstrip("-")))


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
    if isinstance(value, _LongInteger):
        limit = sys.get_int_max_str_digits()
        return [FieldProblem(path, f"integer of {value.digits} digits is over the limit of {limit} digits")]
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


def parse_document(raw: bytes, file: str = "<bytes>", schema_bounds_depth: bool = False) -> Any:
    """Parse ``raw`` as one JSON document under the rules above.

    ``schema_bounds_depth``: the caller validates the value against a schema whose
    fields bound the nesting and refuses (with :func:`check_depth`'s problem) whatever
    lies outside them — artifacts and manifests do — so the fast path skips its walk
    over every value.  Raises :class:`ArtifactError` (field ``""`` for whole-document
    problems).
    """
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ArtifactError(
            file, [FieldProblem("", f"document is {len(raw)} bytes, over the limit of {MAX_DOCUMENT_BYTES}")]
        )
    try:
        value = pydantic_core.from_json(raw, allow_inf_nan=False)
        fast = pydantic_core.to_json(value) == raw.rstrip(b"\n")
    except ValueError:
        fast = False
    if fast:
        if not schema_bounds_depth and _deeper_than(value, MAX_DEPTH):
            raise ArtifactError(file, check_depth(value))
        return value
    return _parse_slow(raw, file)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers deeper than ``limit`` (iterative: no recursion
    limit to hit, and cheap enough for the fast path)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _parse_slow(raw: bytes, file: str) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(file, [FieldProblem("", f"not UTF-8 at byte {exc.start}")]) from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs_hook, parse_constant=_mark_constant, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise ArtifactError(
            file, [FieldProblem("", f"invalid JSON: {exc.msg.removesuffix(' at')} at line {exc.lineno} column {exc.colno}")]
        ) from None
    except RecursionError:
        raise ArtifactError(file, [FieldProblem("", f"nesting deeper than {MAX_DEPTH} levels")]) from None
    problems = check_depth(value)
    if problems:
        raise ArtifactError(file, problems)
    return value


def json_files_under(folder: str | os.PathLike[str], onerror: Callable[[OSError], None] | None = None) -> list[Path]:
    """Every ``*.json`` file under ``folder``, recursively, sorted; files and folders
    whose names start with ``.`` are skipped (temporaries, hidden state).  ``onerror``
    receives each folder that cannot be listed.  The one rule for "the artifacts in a
    folder", used by the loader's override directories, ``validate`` and ``publish``."""
    return [Path(p) for p in json_paths_under(folder, onerror)]


def json_paths_under(folder: str | os.PathLike[str], onerror: Callable[[OSError], None] | None = None) -> list[str]:
    """:func:`json_files_under` as strings, each spelt as ``str()`` of its ``Path``
    (``"./a/x.json"`` is ``"a/x.json"``), in the same order: the loader's scan of an
    override directory, where a ``Path`` per file cost a tenth of the scan."""
    found: list[tuple[tuple[str, ...], str]] = []
    for root, dirs, names in os.walk(folder, onerror=onerror):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        # One Path per folder spells the folder as Path does; a file's name (no
        # separator, never "." or "..") is then joined as Path would join it.
        base = Path(root)
        parts, spelt = base.parts, str(base)
        prefix = "" if spelt == "." else spelt if spelt.endswith(os.sep) else spelt + os.sep
        found.extend((parts + (n,), prefix + n) for n in names if n.endswith(".json") and not n.startswith("."))
    # Path's own ordering, by parts, without its slow comparison method (a thousand files
    # took 70 ms to sort).
    found.sort(key=lambda item: item[0])
    return [path for _, path in found]


def read_file_bytes(path: str | os.PathLike[str], limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them.

    Never blocks and never reads without bound: the file is opened non-blocking and
    refused unless it is a regular file (a FIFO, ``/dev/zero`` or a folder is an
    :class:`ArtifactError`), and reading stops past ``limit``.  A missing file raises
    :class:`FileNotFoundError`; every other failure is an :class:`ArtifactError`
    naming the file."""
    where = os.fsdecode(os.fspath(path))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ArtifactError(where, [FieldProblem("", f"cannot read: {exc.strerror or exc}")]) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ArtifactError(where, [FieldProblem("", "not a regular file")])
        if info.st_size > limit:
            raise ArtifactError(where, [FieldProblem("", f"file is {info.st_size} bytes, over the limit of {limit}")])
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise ArtifactError(where, [FieldProblem("", f"file is over the limit of {limit} bytes")])
        return b"".join(chunks)
    except OSError as exc:
        raise ArtifactError(where, [FieldProblem("", f"cannot read: {exc.strerror or exc}")]) from None
    finally:
        os.close(fd)


def read_document(path: str | os.PathLike[str], schema_bounds_depth: bool = False) -> Any:
    """Read and parse the JSON file at ``path`` (see :func:`parse_document` and
    :func:`read_file_bytes`): only a regular file, never more than the size limit."""
    where = os.fsdecode(os.fspath(path))
    try:
        raw = read_file_bytes(path)
    except FileNotFoundError:
        raise ArtifactError(where, [FieldProblem("", "cannot read: No such file or directory")]) from None
    return parse_document(raw, where, schema_bounds_depth)


_TMP_SUFFIX = ".tmp"


def remove_stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files that :func:`write_atomic` left in ``folder`` when its
    process was killed; returns them.  Only this host's are judged (the name carries the
    writer's host and process id), and only those whose process no longer exists are
    removed: a folder shared between hosts holds other hosts' writes in flight, and a
    file that merely looks like a temporary is not this host's to remove."""
    removed: list[Path] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    host = _host_tag()
    for name in names:
        if not (name.startswith(".") and name.endswith(_TMP_SUFFIX)):
            continue
        parts = name[1:-len(_TMP_SUFFIX)].rsplit(".", 3)
        if len(parts) != 4 or parts[1] != host or not (parts[2].isascii() and parts[2].isdigit()):
            continue
        if _alive(int(parts[2])):
            continue
        path = Path(folder, name)
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


def _host_tag() -> str:
    """This host's name as a temporary file's name carries it: file-name safe, no dots."""
    import socket

    return re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname())[:48] or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_atomic(path: str | os.PathLike[str], data: bytes, durable: bool = True) -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never
    a torn one: a temporary file in the same folder, flushed, then ``os.replace``.
    Concurrent writers of the same path each replace it whole; the last one wins.
    ``durable=False`` skips the flush to disk (``fsync``): a crash may then leave the
    file torn, for data whose reader checks it anyway (a cache)."""
    target = Path(path)
    tmp = stage_atomic(target, data, durable)
    try:
        os.replace(tmp, target)
    except BaseException:
        _discard(tmp)
        raise
    return target


def stage_atomic(path: str | os.PathLike[str], data: bytes, durable: bool = True) -> str:
    """The first half of :func:`write_atomic`: ``data`` written to a new temporary file
    beside ``path`` (its folder made if missing), flushed to disk unless ``durable`` is
    false; returns the temporary file's path, which the caller renames onto ``path``
    with ``os.replace`` (when it chooses, under a lock of its own, say) or removes."""
    target = Path(path)
    prefix = f".{target.name}.{_host_tag()}.{os.getpid()}."
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=prefix, suffix=_TMP_SUFFIX)
    except FileNotFoundError:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=prefix, suffix=_TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
    except BaseException:
        _discard(tmp)
        raise
    return tmp


def _discard(tmp: str) -> None:
    """Remove a temporary file a write left behind (gone already is fine)."""
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
