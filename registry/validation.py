"""Checking files as the loader would read them: :func:`validate_path` and its report.

A file is checked by the rules that decide whether the loader serves it: the schema, then
the winner against its kernel's declaration (where this environment declares the kernel),
a table or pack row by row, a package folder's manifest against its files; and a folder
named is searched as the loader searches an override directory, so that two artifacts of
one slot in it are reported where the loader would serve only one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flyconfigs.errors import FieldProblem, FlyconfigsError
from flyconfigs.registry.checks.check import check_entries, check_package_folder, check_table, check_winner
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.sources.entries import Source
from flyconfigs.registry.sources.packs import PackRef, override_table
from flyconfigs.registry.sources.tables import TableRef
from flyconfigs.schema.jsonio import json_files_under, read_document
from flyconfigs.schema.load import parse_artifact, parse_pack, parse_table
from flyconfigs.schema.manifest import MANIFEST_FILE
from flyconfigs.schema.pack import is_pack_document
from flyconfigs.schema.table import is_table_document

__all__ = ["FileValidation", "ValidationReport", "validate_files", "validate_path"]

_FIELD_OF = {"test-double": "provenance.backend", "invalid-config": "winner.config", "kernel-name-clash": "key",
             "stale-artifact": "kernel"}
"""The artifact field each refusal of :func:`~flyconfigs.registry.checks.check.check_winner` is about."""


@dataclass(frozen=True)
class FileValidation:
    """One file checked: its path, every problem found in it (each with the field it is
    about: a dotted field path, a table's row entry, ``""`` for the whole document) and
    notes that are no problem (a field of a newer minor ignored, a migration applied)."""

    file: Path
    problems: tuple[FieldProblem, ...]
    notes: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        """Whether no problem was found: the loader serves what the file holds."""
        return not self.problems


@dataclass(frozen=True)
class ValidationReport:
    """Every file :func:`validate_path` checked, in the order found (folders searched as
    the loader searches them); a path that held no file to check adds none."""

    files: tuple[FileValidation, ...]

    @property
    def invalid(self) -> int:
        """How many files have a problem."""
        return sum(not f.valid for f in self.files)

    @property
    def ok(self) -> bool:
        """Whether there was a file to check and every file is valid."""
        return bool(self.files) and not self.invalid


def validate_path(*paths: str | os.PathLike[str]) -> ValidationReport:
    """Check the artifact, table, pack and manifest files ``paths`` name (files, and the
    ``*.json`` files under folders), each by the loader's rules, every problem named with
    its file and field.  Raises :class:`FileNotFoundError` for a path that does not
    exist; bad data is never raised, it is reported."""
    named = [Path(p) for p in paths]
    files: list[Path] = []
    for path in named:
        if path.is_dir():
            files.extend(json_files_under(path))
        elif os.path.lexists(path):
            files.append(path)
        else:
            raise FileNotFoundError(2, "No such file or directory", str(path))
    return validate_files(files, [p for p in named if p.is_dir()])


def validate_files(files: Sequence[Path], folders: Sequence[Path] = ()) -> ValidationReport:
    """:func:`validate_path` of the files ``files``, with the artifacts of one slot twice
    in one of ``folders`` reported on the files (each folder as the loader searches it)."""
    results = {str(path): _check(path) for path in files}
    extra: dict[str, list[FieldProblem]] = {}
    for problem in _duplicates(folders):
        # A table's row is named ``<table>#<entry>``: the problem is the table file's.
        where, _, row_entry = problem.where.partition("#") if problem.where not in results else (problem.where, "", "")
        if where in results:
            extra.setdefault(where, []).append(FieldProblem(row_entry or "key", f"{problem.kind}: {problem.message}"))
    out = []
    for path in files:
        checked = results[str(path)]
        more = extra.pop(str(path), [])  # a file named twice is reported once with them
        out.append(FileValidation(checked.file, (*checked.problems, *more), checked.notes) if more else checked)
    return ValidationReport(tuple(out))


def _found(problems: Sequence[Problem], file: str, plain: bool = False) -> tuple[FieldProblem, ...]:
    """``problems`` as field problems of ``file``: a row's entry (``<file>#<entry>``) or
    the artifact field the kind is about."""
    if plain:
        return tuple(FieldProblem(_FIELD_OF.get(p.kind, ""), f"{p.kind}: {p.message}") for p in problems)
    return tuple(FieldProblem(p.where.removeprefix(file).lstrip("#") or _FIELD_OF.get(p.kind, ""), f"{p.kind}: {p.message}")
                 for p in problems)


def _check(path: Path) -> FileValidation:
    """One file checked (:func:`validate_path`)."""
    file = str(path)
    notes: list[str] = []
    try:
        if path.name == MANIFEST_FILE:
            found, notes = check_package_folder(path.parent)
            return FileValidation(path, tuple(FieldProblem(p.where, f"{p.kind}: {p.message}") for p in found), tuple(notes))
        document = read_document(path, schema_bounds_depth=True)
        log = ProblemLog()
        source = Source("override", str(path.parent), (0, 0))
        if is_pack_document(document):
            # A pack (1.7) is checked row by row, and its measurements file too.
            report = parse_pack(document, file)[1]
            notes = [f"ignored field of a newer minor: {f}" for f in report.ignored_fields]
            pack = override_table(path, document, source, log)
            notes += check_entries(pack.entries(log) if pack is not None else [], log)
            if isinstance(pack, PackRef):
                try:
                    pack.measurements()
                except FlyconfigsError as exc:
                    log.report(Problem("invalid-artifact", str(pack.measurements_path()), str(exc)))
            return FileValidation(path, _found(log.problems(), file), tuple(notes))
        if is_table_document(document):
            parsed, report = parse_table(document, file)
            notes = [f"ignored field of a newer minor: {f}" for f in report.ignored_fields]
            table = TableRef(parsed.kernel.name, parsed.device.identity, file, source, rows=len(parsed.rows), table=parsed)
            notes += check_table(table, log)
            return FileValidation(path, _found(log.problems(), file), tuple(notes))
        artifact, report = parse_artifact(document, file)
        notes = [f"ignored field of a newer minor: {f}" for f in report.ignored_fields]
        notes += [f"migrated from {m}" for m in report.migrated_from]
        notes += check_winner(artifact, file, log)
        return FileValidation(path, _found(log.problems(), file, plain=True), tuple(notes))
    except FlyconfigsError as exc:
        problems = tuple(getattr(exc, "problems", ())) or (FieldProblem("", str(exc)),)
        return FileValidation(path, problems, tuple(notes))


def _duplicates(folders: Sequence[Path]) -> list[Problem]:
    """Artifacts of one slot twice in one folder: which one serves is what the loader's
    search serves from that folder alone."""
    from flyconfigs.registry.resolve import Resolver

    # The loader's search logs what it skips; validate reports each problem once, itself.
    logger = logging.getLogger("flyconfigs.registry")
    found: list[Problem] = []
    disabled, logger.disabled = logger.disabled, True
    try:
        for folder in folders:
            resolver = Resolver([str(folder)], detector=None, packages=False)
            resolver.collisions()
            found += [p for p in resolver.problems.problems() if p.kind == "duplicate"]
    finally:
        logger.disabled = disabled
    return found
