"""Override directories (``FLYCONFIGS_PATH``) indexed as lazily as packages.

A data package's manifest says each artifact's kernel, device and key, so the loader
reads an artifact file only when a call needs it.  A folder of tuning output has no
manifest; reading and validating every file to learn the same three fields took seconds
for a thousand artifacts.  :func:`scan_directory` reads only each file's tail: in the
canonical JSON the tuner, ``import`` and ``predict`` write (sorted keys, no spaces) the
top-level members from ``device`` on (``kernel``, ``key``, ``provenance``, ...,
``winner``) end the file, after the long ``candidates``.  Those members are decoded and
their identity validated; a file whose tail does not hold them (hand-edited, indented,
an older major) is read and validated whole, as before.  Either way the artifact is
validated in full, and its identity compared with the indexed one, when it is first
loaded (:meth:`~flyconfigs.registry.sources.Entry.load`), so a tail never serves
anything the full file does not say.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flyconfigs.errors import ArtifactError, UnsupportedSchemaVersionError
from flyconfigs.registry.ownership import TIERS
from flyconfigs.registry.problems import Problem, ProblemLog
from flyconfigs.registry.sources import PATH_ENV, Entry, Source
from flyconfigs.schema.jsonio import MAX_DOCUMENT_BYTES, json_files_under, read_document
from flyconfigs.schema.load import parse_artifact
from flyconfigs.schema.models import SCHEMA_VERSION, DeviceIdentity

__all__ = ["override_directories", "scan_directory"]

_TAIL = 16384
"""Bytes read from the end of each file to find its identity."""
_ANCHOR = b',"device":{'
_DECODER = json.JSONDecoder()
_MAJOR = SCHEMA_VERSION.split(".")[0]


def override_directories(value: str | None = None) -> list[Path]:
    """The directories of ``FLYCONFIGS_PATH`` (``os.pathsep``-separated), in order."""
    text = os.environ.get(PATH_ENV, "") if value is None else value
    return [Path(p) for p in text.split(os.pathsep) if p]


def scan_directory(folder: Path, rank: int, problems: ProblemLog) -> list[Entry]:
    """Every artifact under ``folder`` (``*.json``, recursively, dot-files and
    dot-folders skipped) as an entry whose file is read in full on first use; a file
    whose identity cannot be read, a special file, and folders that are missing or
    cannot be read are reported and skipped."""
    source = Source("override", str(folder), (TIERS["override"], rank))
    entries: list[Entry] = []
    if not folder.is_dir():
        problems.report(Problem("unreadable-source", str(folder), f"{PATH_ENV} names a folder that does not exist"))
        return entries

    def unreadable(exc: OSError) -> None:
        problems.report(Problem("unreadable-source", str(exc.filename or folder), f"cannot read: {exc.strerror or exc}"))

    for path in json_files_under(folder, unreadable):
        entry = _indexed(path, source) or _parsed(path, source, problems)
        if entry is not None:
            entries.append(entry)
    return entries


def _indexed(path: Path, source: Source) -> Entry | None:
    """The entry for ``path`` from its tail, or ``None`` when the tail does not hold a
    canonical identity (the caller then reads the file whole)."""
    tail = _read_tail(path)
    if tail is None:
        return None
    members = _top_level_from_device(tail)
    if members is None:
        return None
    version, kernel, key = members.get("schema_version"), members.get("kernel"), members.get("key")
    if not (isinstance(version, str) and version.split(".")[0] == _MAJOR and isinstance(kernel, dict)
            and isinstance(kernel.get("name"), str) and isinstance(key, dict)):
        return None
    try:
        device = DeviceIdentity.model_validate({f: members["device"].get(f) for f in DeviceIdentity.model_fields})
    except (ValidationError, AttributeError, TypeError):
        return None
    selection = members.get("selection")
    provenance = members.get("provenance")
    rule = selection.get("rule") if isinstance(selection, dict) else None
    created = provenance.get("created") if isinstance(provenance, dict) else None
    return Entry(kernel["name"], key, device, str(path), source, rule=rule if isinstance(rule, str) else None,
                 created=created if isinstance(created, str) else None)


def _read_tail(path: Path) -> bytes | None:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_DOCUMENT_BYTES:
            return None  # the full read reports it
        os.lseek(fd, max(0, info.st_size - _TAIL), os.SEEK_SET)
        return os.read(fd, _TAIL)
    except OSError:
        return None
    finally:
        os.close(fd)


def _top_level_from_device(tail: bytes) -> dict[str, Any] | None:
    """The members from ``"device"`` to the end of the document's top-level object,
    when ``tail`` holds them in compact JSON; ``None`` otherwise.  The anchor is proven
    top-level by the members after it ending the document with one closing brace."""
    text = tail.decode("utf-8", errors="replace")  # the tail may start inside a character
    anchor = _ANCHOR.decode()
    end = len(text.rstrip())
    at = text.rfind(anchor)
    while at >= 0:
        members = _members(text, at + 1, end)
        if members is not None and "device" in members:
            return members
        at = text.rfind(anchor, 0, at)
    return None


def _members(text: str, at: int, end: int) -> dict[str, Any] | None:
    members: dict[str, Any] = {}
    try:
        while True:
            name, at = _DECODER.raw_decode(text, at)
            if not isinstance(name, str) or text[at] != ":":
                return None
            members[name], at = _DECODER.raw_decode(text, at + 1)
            if text[at] == "}":
                return members if at + 1 == end else None
            if text[at] != ",":
                return None
            at += 1
    except (ValueError, IndexError):
        return None


def _parsed(path: Path, source: Source, problems: ProblemLog) -> Entry | None:
    try:
        artifact, _ = parse_artifact(read_document(path, schema_bounds_depth=True), str(path))
    except UnsupportedSchemaVersionError as exc:
        problems.report(Problem("unsupported-major", str(path), exc.problems[0].message))
        return None
    except ArtifactError as exc:
        problems.report(Problem("invalid-artifact", str(path), "; ".join(str(p) for p in exc.problems)))
        return None
    return Entry(artifact.kernel.name, dict(artifact.key), artifact.device.identity, str(path), source,
                 _artifact=artifact)
