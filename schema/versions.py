"""Schema versions and the migrations between them.

A document's version is its ``schema_version`` (``"MAJOR.MINOR"``) or, for a foreign
format, a format id such as ``"flydsl-1"``.  :func:`upgrade` applies registered
:class:`Migration` steps until the document is in the current major; a newer major is
refused with :class:`~flyconfigs.errors.UnsupportedSchemaVersionError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flyconfigs.errors import ArtifactError, FieldProblem, UnsupportedSchemaVersionError
from flyconfigs.schema.models import SCHEMA_VERSION

__all__ = [
    "CURRENT_MAJOR",
    "CURRENT_MINOR",
    "Migration",
    "detect_format",
    "migrations",
    "parse_version",
    "register_migration",
    "upgrade",
]

CURRENT_MAJOR, CURRENT_MINOR = (int(p) for p in SCHEMA_VERSION.split("."))
_VERSION = re.compile(r"^([0-9]{1,4})\.([0-9]{1,4})$")
_MAX_STEPS = 16


@dataclass(frozen=True)
class Migration:
    """One step: turns a document of format ``source`` into one of format ``target``.

    ``step`` receives the parsed document and returns a new one; it raises
    :class:`ArtifactError` for input it cannot convert.
    """

    source: str
    target: str
    step: Callable[[dict[str, Any], str], dict[str, Any]]


_REGISTRY: dict[str, Migration] = {}


def register_migration(migration: Migration) -> Migration:
    """Add ``migration`` to the registry; one step per source format."""
    if migration.source in _REGISTRY:
        raise ValueError(f"a migration from {migration.source!r} is already registered")
    _REGISTRY[migration.source] = migration
    return migration


def migrations() -> tuple[Migration, ...]:
    """Every registered migration step."""
    return tuple(_REGISTRY.values())


def parse_version(value: object, file: str = "<bytes>") -> tuple[int, int]:
    """``"1.0"`` → ``(1, 0)``; anything else is an :class:`ArtifactError` on ``schema_version``."""
    if not isinstance(value, str) or not (m := _VERSION.match(value)):
        raise ArtifactError(file, [FieldProblem("schema_version", f"expected 'MAJOR.MINOR', got {value!r}")])
    return int(m.group(1)), int(m.group(2))


def detect_format(data: dict[str, Any], file: str = "<bytes>") -> str:
    """The format id of a parsed document: its ``schema_version``, or ``"flydsl-1"``
    for FlyDSL's offline artifacts (``version`` exactly the int 1 plus ``identity``)."""
    if "schema_version" in data:
        major, minor = parse_version(data["schema_version"], file)
        return f"{major}.{minor}"
    version = data.get("version")
    if type(version) is int and version == 1 and "identity" in data:
        return "flydsl-1"
    raise ArtifactError(file, [FieldProblem("schema_version", "missing: not a flyconfigs artifact")])


def upgrade(data: dict[str, Any], file: str = "<bytes>") -> tuple[dict[str, Any], tuple[str, ...]]:
    """Migrate ``data`` into the current major.

    Returns the document and the formats it passed through (empty when it already was
    current).  Raises :class:`UnsupportedSchemaVersionError` for a newer major and
    :class:`ArtifactError` for a format no migration reads.
    """
    path: list[str] = []
    for _ in range(_MAX_STEPS):
        fmt = detect_format(data, file)
        if _VERSION.match(fmt):
            major = int(fmt.split(".")[0])
            if major == CURRENT_MAJOR:
                return data, tuple(path)
            if major > CURRENT_MAJOR:
                raise UnsupportedSchemaVersionError(file, fmt, SCHEMA_VERSION)
            fmt = f"{major}.x"
        migration = _REGISTRY.get(fmt)
        if migration is None:
            raise ArtifactError(file, [FieldProblem("schema_version", f"no migration from format {fmt!r}")])
        path.append(fmt)
        data = migration.step(data, file)
    raise ArtifactError(file, [FieldProblem("schema_version", "migration did not converge")])
