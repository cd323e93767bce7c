"""Loading artifacts: bytes or files in, validated :class:`Artifact` out.

The only exception that leaves these functions is
:class:`~flyconfigs.errors.ArtifactError` (or its subclass for an unsupported major):
every malformed input, whatever it is, becomes one, naming the file and each bad field.
"""

from __future__ import annotations

import logging
import os
import re
import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from flyconfigs.errors import ArtifactError, FieldProblem, UnsupportedSchemaVersionError
from flyconfigs.schema.jsonio import check_depth, parse_document, read_document
from flyconfigs.schema.models import SCHEMA_VERSION, Artifact
from flyconfigs.schema.versions import CURRENT_MAJOR, CURRENT_MINOR, parse_version, upgrade

if TYPE_CHECKING:
    # Imported where first used: reading artifacts (a resolve from FLYCONFIGS_PATH)
    # needs neither the manifest's models nor the table's, a few ms each to build.
    from flyconfigs.schema.manifest import Manifest
    from flyconfigs.schema.pack import Measurements, Pack
    from flyconfigs.schema.table import Table

__all__ = ["LoadReport", "load_artifact", "load_artifact_whole", "load_table", "loads_artifact", "parse_artifact",
           "parse_manifest", "parse_manifest_report", "parse_measurements", "parse_pack", "parse_table",
           "refuse_if_partial", "validation_problems"]

logger = logging.getLogger("flyconfigs.schema")
ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass(frozen=True)
class LoadReport:
    """What loading did besides validating: fields of a newer minor it ignored, and the
    formats it migrated from."""

    file: str
    ignored_fields: tuple[str, ...] = ()
    migrated_from: tuple[str, ...] = ()


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model class inside a field annotation, and whether it is a sequence of them."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_of(typing.get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found, seq = _model_of(arg)
            if found is not None:
                return found, seq
    if origin in (tuple, list):
        args = typing.get_args(annotation)
        if args:
            found, _ = _model_of(args[0])
            if found is not None:
                return found, True
    return None, False


def _strip_unknown(model: type[BaseModel], data: Any, path: str, found: list[str]) -> Any:
    """A copy of ``data`` without fields ``model`` does not declare; their paths go to ``found``."""
    if not isinstance(data, dict):
        return data
    result: dict[str, Any] = {}
    for name, value in data.items():
        field = model.model_fields.get(name)
        where = f"{path}.{name}" if path else name
        if field is None:
            found.append(where)
            continue
        inner, is_seq = _model_of(field.annotation)
        if inner is not None and is_seq and isinstance(value, list):
            value = [_strip_unknown(inner, v, f"{where}[{i}]", found) for i, v in enumerate(value)]
        elif inner is not None:
            value = _strip_unknown(inner, value, where, found)
        result[name] = value
    return result


def _existing_prefix(data: Any, loc: tuple[int | str, ...]) -> str:
    """The longest prefix of a pydantic error location present in ``data``, dotted.

    Union errors add member tags (``int``, ``constrained-str``) to locations; they are
    not fields, so they stop the walk.
    """
    parts: list[str] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
            parts.append(f".{part}" if parts else part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            parts.append(f"[{part}]")
        elif isinstance(node, dict) and isinstance(part, str) and not parts and len(loc) == 1:
            parts.append(part)
            break
        elif isinstance(node, dict) and isinstance(part, str):
            parts.append(f".{part}")
            break
        else:
            break
    return "".join(parts)


_PATHED = re.compile(r"^Value error, ([A-Za-z_][A-Za-z0-9_.\[\]]*): (.*)$", re.S)


def validation_problems(exc: ValidationError, data: Any) -> list[FieldProblem]:
    """Pydantic's errors as field problems, one per field path, union messages joined.

    Cross-field rules name their field by starting the message with ``path: ``."""
    merged: dict[str, list[str]] = {}
    for err in exc.errors(include_url=False):
        path = _existing_prefix(data, tuple(err["loc"]))
        message = err["msg"]
        pathed = _PATHED.match(message)
        if pathed:
            path = f"{path}.{pathed.group(1)}" if path else pathed.group(1)
            message = pathed.group(2)
        if err["type"] not in ("missing", "extra_forbidden"):
            value = err.get("input")
            if not isinstance(value, (dict, list)):
                message = f"{message} (got {value!r})"
        bucket = merged.setdefault(path, [])
        if message not in bucket:
            bucket.append(message)
    return [FieldProblem(path, " or ".join(msgs)) for path, msgs in merged.items()]


def _check_schema_version(data: dict[str, Any], file: str, model: type[BaseModel], ignored: list[str]) -> dict[str, Any]:
    """The one rule for every versioned document: a newer major is refused, the fields a
    newer minor added are stripped (their paths go to ``ignored``)."""
    major, minor = parse_version(data.get("schema_version"), file)
    if major > CURRENT_MAJOR:
        raise UnsupportedSchemaVersionError(file, str(data.get("schema_version")), SCHEMA_VERSION)
    if major == CURRENT_MAJOR and minor > CURRENT_MINOR:
        too_deep = check_depth(data)  # what is stripped is refused when too deep, as if read
        if too_deep:
            raise ArtifactError(file, too_deep)
        return _strip_unknown(model, data, "", ignored)  # type: ignore[no-any-return]
    return data


def _raise_if_too_deep(data: Any, file: str) -> None:
    """Nesting beyond the limit is reported as such, whatever else is wrong, so that a
    document is refused for the same reason however it was formatted."""
    problems = check_depth(data)
    if problems:
        raise ArtifactError(file, problems) from None


def _validated(model: type[ModelT], data: Any, file: str, migrate: bool) -> tuple[ModelT, LoadReport]:
    """``data`` as ``model`` under the one rule for versioned documents: older formats
    migrated (``migrate``), a newer major refused, a newer minor's fields ignored and
    reported, nesting beyond the limit reported as such whatever else is wrong."""
    if not isinstance(data, dict):
        raise ArtifactError(file, [FieldProblem("", f"expected a JSON object, got {type(data).__name__}")])
    ignored: list[str] = []
    migrated: tuple[str, ...] = ()
    try:
        if migrate:
            data, migrated = upgrade(data, file)
        data = _check_schema_version(data, file, model, ignored)
    except ArtifactError:
        _raise_if_too_deep(data, file)
        raise
    try:
        value = model.model_validate(data)
    except ValidationError as exc:
        raise ArtifactError(file, check_depth(data) or validation_problems(exc, data)) from None
    if ignored:
        logger.info("%s: ignored fields of schema %s: %s", file, data["schema_version"], ", ".join(ignored))
    return value, LoadReport(file, tuple(ignored), migrated)


def parse_artifact(data: Any, file: str = "<bytes>") -> tuple[Artifact, LoadReport]:
    """Validate a parsed document as an artifact, migrating older formats and ignoring
    (and reporting) the unknown fields of a newer minor.  A table (1.6) is refused as
    such, on ``form``: :func:`parse_table` reads it."""
    if isinstance(data, dict) and "form" in data:  # an artifact has no "form": only then can it be a table
        from flyconfigs.schema.table import is_table_document

        if is_table_document(data):
            raise ArtifactError(file, [FieldProblem("form", "a table of many keys (schema 1.6), not one artifact")])
        if data.get("form") in ("pack", "measurements"):
            raise ArtifactError(file, [FieldProblem("form", f"a {data['form']} of many keys (schema 1.7), not one "
                                                            "artifact")])
    return _validated(Artifact, data, file, migrate=True)


def parse_table(data: Any, file: str = "<bytes>") -> tuple[Table, LoadReport]:
    """Validate a parsed document as a table (schema 1.6) under the rule of every
    versioned document: a newer major refused, a newer minor's fields ignored and
    reported.  No older format is a table, so nothing is migrated;
    :class:`ArtifactError` naming ``file`` and each bad field."""
    from flyconfigs.schema.table import Table

    return _validated(Table, data, file, migrate=False)


def parse_pack(data: Any, file: str = "<bytes>") -> tuple[Pack, LoadReport]:
    """Validate a parsed document as a pack (schema 1.7, :mod:`flyconfigs.schema.pack`)
    under the rule of every versioned document; :class:`ArtifactError` naming ``file``
    and each bad field."""
    from flyconfigs.schema.pack import Pack

    return _validated(Pack, data, file, migrate=False)


def parse_measurements(data: Any, file: str = "<bytes>") -> tuple[Measurements, LoadReport]:
    """Validate a parsed (decompressed) document as a pack's measurements (schema 1.7)."""
    from flyconfigs.schema.pack import Measurements

    return _validated(Measurements, data, file, migrate=False)


def load_table(path: str | os.PathLike[str]) -> Table:
    """Read, parse and validate the table file at ``path``."""
    return parse_table(read_document(path, schema_bounds_depth=True), os.fspath(path))[0]


def parse_manifest(data: Any, file: str = "<bytes>") -> Manifest:
    """Validate a parsed document as a data package's manifest under the same version
    rule as an artifact (a newer major refused with
    :class:`~flyconfigs.errors.UnsupportedSchemaVersionError`, a newer minor's fields
    ignored); :class:`ArtifactError` naming ``file`` and each bad field."""
    return parse_manifest_report(data, file)[0]


def parse_manifest_report(data: Any, file: str = "<bytes>") -> tuple[Manifest, LoadReport]:
    """:func:`parse_manifest`, with the report of what was ignored."""
    from flyconfigs.schema.manifest import Manifest

    return _validated(Manifest, data, file, migrate=False)


def loads_artifact(raw: bytes, file: str = "<bytes>") -> Artifact:
    """Parse and validate an artifact from bytes."""
    return parse_artifact(parse_document(raw, file, schema_bounds_depth=True), file)[0]


def load_artifact(path: str | os.PathLike[str]) -> Artifact:
    """Read, parse and validate the artifact file at ``path``."""
    return parse_artifact(read_document(path, schema_bounds_depth=True), os.fspath(path))[0]


def refuse_if_partial(report: LoadReport, schema_version: str, what: str) -> None:
    """Refuse to rewrite (``what``: republish, export) a document of which this reader
    ignored the fields of a newer minor: the copy would keep its newer label and lose
    those fields.  :class:`ArtifactError` on ``schema_version`` naming them."""
    if report.ignored_fields:
        shown = ", ".join(report.ignored_fields[:5]) + (" …" if len(report.ignored_fields) > 5 else "")
        raise ArtifactError(report.file, [FieldProblem(
            "schema_version",
            f"schema {schema_version} is newer than this flyconfigs reads in full ({SCHEMA_VERSION}): to {what} it "
            f"would drop {shown} and keep the label {schema_version}; upgrade flyconfigs")])


def load_artifact_whole(path: str | os.PathLike[str], what: str = "rewrite it") -> Artifact:
    """:func:`load_artifact` for a caller that writes the artifact out again (``what``
    it does, for the message): an artifact of a newer minor with fields this reader does
    not know is refused (:func:`refuse_if_partial`) rather than copied without them."""
    artifact, report = parse_artifact(read_document(path, schema_bounds_depth=True), os.fspath(path))
    refuse_if_partial(report, artifact.schema_version, what)
    return artifact
