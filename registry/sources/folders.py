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
loaded (:meth:`~flyconfigs.registry.sources.entries.Entry.load`), so a tail never serves
anything the full file does not say.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flyconfigs.errors import ArtifactError, UnsupportedSchemaVersionError
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.core.settings import read_settings
from flyconfigs.registry.sources.entries import PATH_ENV, Entry, Source
from flyconfigs.registry.sources.ownership import TIERS
from flyconfigs.schema.jsonio import MAX_DOCUMENT_BYTES, json_paths_under, read_document
from flyconfigs.schema.load import parse_artifact
from flyconfigs.schema.models import SCHEMA_VERSION, DeviceIdentity

__all__ = ["override_directories", "scan_directory"]

_TAILS = (4096, 65536)
"""Bytes read from the end of each file to find its identity: a short tail first (it
holds the identity of every artifact the tools write), then a longer one."""
_ANCHOR = b',"device":{'
_MAJOR = SCHEMA_VERSION.split(".")[0]


def override_directories(value: str | None = None) -> list[Path]:
    """The directories of ``FLYCONFIGS_PATH`` (``os.pathsep``-separated), in order."""
    text = read_settings().path if value is None else value
    return [Path(p) for p in text.split(os.pathsep) if p]


TableFound = Callable[[str, str, DeviceIdentity, Source, str], None]
"""Told of a table whose kernel and device were read from its head (its path, kernel,
device and source), rows not read."""


def scan_directory(folder: Path, rank: int, problems: ProblemLog,
                   on_table: Callable[[Path, Any, Source], None] | None = None,
                   on_table_head: TableFound | None = None) -> list[Entry]:
    """Every artifact under ``folder`` (``*.json``, recursively, dot-files and
    dot-folders skipped) as an entry whose file is read in full on first use; a file
    whose identity cannot be read, a special file, and folders that are missing or
    cannot be read are reported and skipped.  A table or a pack (schema 1.6 and 1.7, whose
    tail never holds an artifact's identity) in the canonical form the tools write is indexed as
    lazily as a package's: its kernel and device are read from its head and handed to
    ``on_table_head``, its rows read and validated only when its kernel is resolved on
    its arch (:class:`~flyconfigs.registry.sources.tables.TableRef`); another table is read
    whole and handed to ``on_table`` with its source; without either it is reported as
    not an artifact."""
    source = Source("override", str(folder), (TIERS["override"], rank))
    entries: list[Entry] = []
    if not folder.is_dir():
        problems.report(Problem("unreadable-source", str(folder), f"{PATH_ENV} names a folder that does not exist"))
        return entries

    def unreadable(exc: OSError) -> None:
        problems.report(Problem("unreadable-source", str(exc.filename or folder), f"cannot read: {exc.strerror or exc}"))

    # Paths as strings: a Path per file cost a tenth of the scan.
    for path in json_paths_under(folder, unreadable):
        entry = _indexed(path, source)
        if entry is None and on_table_head is not None:
            head = _table_head(path)
            if head is not None:
                on_table_head(path, head[0], head[1], source, head[2])
                continue
        entry = entry or _parsed(path, source, problems, on_table)
        if entry is not None:
            entries.append(entry)
    return entries


def _indexed(path: str, source: Source) -> Entry | None:
    """The entry for ``path`` from its tail, or ``None`` when the tail does not hold a
    canonical identity (the caller then reads the file whole)."""
    members = None
    for size in _TAILS:
        tail, whole = _read_tail(path, size)
        members = _top_level_from_device(tail) if tail is not None else None
        if members is not None or whole:
            break
    if members is None:
        return None
    version, kernel, key = members.get("schema_version"), members.get("kernel"), members.get("key")
    if not (isinstance(version, str) and version.split(".")[0] == _MAJOR and isinstance(kernel, dict)
            and isinstance(kernel.get("name"), str) and isinstance(key, dict)):
        return None
    device = _device(members["device"])
    if device is None:
        return None
    selection = members.get("selection")
    provenance = members.get("provenance")
    rule = selection.get("rule") if isinstance(selection, dict) else None
    created = provenance.get("created") if isinstance(provenance, dict) else None
    version, sha = kernel.get("version"), kernel.get("source_sha256")
    binding = (version, sha) if type(version) is int and (sha is None or isinstance(sha, str)) else None
    return Entry(kernel["name"], key, device, path, source, rule=rule if isinstance(rule, str) else None,
                 created=created if isinstance(created, str) else None, binding=binding)


_IDENTITY_FIELDS = tuple(DeviceIdentity.model_fields)
_DEVICES: dict[object, DeviceIdentity | None] = {}
"""Device identities validated so far, by their JSON (a folder's files share a few)."""


def _device(data: object) -> DeviceIdentity | None:
    if not isinstance(data, dict):
        return None
    values = [data.get(f) for f in _IDENTITY_FIELDS]
    try:
        # Typed: 1 and True hash alike, but only one of them is a compute-unit count.
        token: object = tuple([(type(v), tuple(v) if type(v) is list else v) for v in values])
        hash(token)
    except TypeError:
        token = json.dumps(dict(zip(_IDENTITY_FIELDS, values, strict=True)), sort_keys=True)
    try:
        return _DEVICES[token]
    except KeyError:
        pass
    found: DeviceIdentity | None
    try:
        found = DeviceIdentity.model_validate(dict(zip(_IDENTITY_FIELDS, values, strict=True)))
    except ValidationError:
        found = None
    if len(_DEVICES) > 1024:
        _DEVICES.clear()
    _DEVICES[token] = found
    return found


def _read_tail(path: str, size: int) -> tuple[bytes | None, bool]:
    """The last ``size`` bytes of the regular file ``path`` and whether they are the
    whole file; ``None`` for anything else (the full read reports it)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None, True
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_DOCUMENT_BYTES:
            return None, True
        return _pread(fd, size, max(0, info.st_size - size)), info.st_size <= size
    except OSError:
        return None, True
    finally:
        os.close(fd)


def _top_level_from_device(tail: bytes) -> dict[str, Any] | None:
    """The members from ``"device"`` to the end of the document's top-level object,
    when ``tail`` holds them in compact JSON; ``None`` otherwise.  ``{`` and the text
    from the anchor on parse as one object only when the anchor's braces close exactly
    at the end of the document, which proves the anchor top-level."""
    at = tail.rfind(_ANCHOR)
    for _ in range(_ATTEMPTS):
        if at < 0:
            break
        try:
            # json.loads of these bytes, less its encoding detection: they start '{"'.
            members = _DECODE("{" + tail[at + 1:].decode("utf-8", "surrogatepass"))
        except (ValueError, RecursionError):
            # Nested (extra closing braces), not JSON at all, a number JSON has not
            # (NaN, Infinity, 1e999) or nesting deeper than Python recurses: the full
            # read decides, and reports the file.
            members = None
        if isinstance(members, dict) and "device" in members:
            return members
        at = tail.rfind(_ANCHOR, 0, at)
    return None


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: Python's reader makes it inf
        raise ValueError(f"{text} overflows a float")
    return value


_DECODE = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float).decode
"""Strict JSON: a key indexed from a tail never holds a number the full read refuses
(``NaN``, ``Infinity``, ``1e999``), which would break every match of its kernel."""


_TABLE_START = '{"columns":'
_TABLE_KERNELS = ((',"form":"table","kernel":', "table"), (',"form":"pack","kernel":', "pack"))
_TABLE_VERSION = ',"schema_version":'
_RAW_DECODE = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float).raw_decode


def _table_head(path: str) -> tuple[str, DeviceIdentity, str] | None:
    """A canonical table's or pack's kernel name, device and form (``table`` or ``pack``),
    read without its rows: the members
    sort as ``columns``, ``device``, (``entries``,) ``form``, ``kernel``, …, ``rows``,
    ``schema_version``, ``selection``, so the device follows the columns, the kernel
    follows ``"form":"table"`` (the entries between are strings, in which that text
    cannot stand unescaped), and the version is near the end; ``None`` for any other
    file (it is then read whole).  The table is validated in full, and its kernel and
    device compared with these, when it is first read."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_DOCUMENT_BYTES:
            return None
        start = os.read(fd, len(_TABLE_START))
        if start != _TABLE_START.encode():
            return None
        raw = start + os.read(fd, info.st_size)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        text = raw.decode("utf-8")
        _, at = _RAW_DECODE(text, len(_TABLE_START))
        if not text.startswith(',"device":', at):
            return None
        device, at = _RAW_DECODE(text, at + len(',"device":'))
        for marker, kind in _TABLE_KERNELS:
            found = text.find(marker, at)
            if found >= 0:
                form = kind
                break
        else:
            return None
        kernel, _ = _RAW_DECODE(text, found + len(marker))
        at = text.rfind(_TABLE_VERSION, max(0, len(text) - 4096))
        version = _RAW_DECODE(text, at + len(_TABLE_VERSION))[0] if at >= 0 else None
    except (ValueError, RecursionError):
        return None
    if not (isinstance(version, str) and version.split(".")[0] == _MAJOR and isinstance(kernel, dict)
            and isinstance(kernel.get("name"), str)):
        return None
    identity = _device(device)
    return None if identity is None else (kernel["name"], identity, form)


def _pread_seek(fd: int, size: int, offset: int) -> bytes:
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, size)


_pread: Callable[[int, int, int], bytes] = getattr(os, "pread", _pread_seek)

_ATTEMPTS = 4
"""Anchors tried from the end before the file is read whole: a file the tools wrote has
its top-level one last, and one made to hold many nested ones costs no more than this."""


def _parsed(path: str, source: Source, problems: ProblemLog,
            on_table: Callable[[Path, Any, Source], None] | None = None) -> Entry | None:
    try:
        data = read_document(path, schema_bounds_depth=True)
        if on_table is not None and isinstance(data, dict) and "form" in data:  # only a table or pack has "form"
            from flyconfigs.schema.pack import is_pack_document
            from flyconfigs.schema.table import is_table_document

            if is_table_document(data) or is_pack_document(data):
                on_table(Path(path), data, source)
                return None
        artifact, _ = parse_artifact(data, path)
    except UnsupportedSchemaVersionError as exc:
        problems.report(Problem("unsupported-major", path, exc.problems[0].message))
        return None
    except ArtifactError as exc:
        problems.report(Problem("invalid-artifact", path, "; ".join(str(p) for p in exc.problems)))
        return None
    return Entry(artifact.kernel.name, dict(artifact.key), artifact.device.identity, path, source,
                 _artifact=artifact)
