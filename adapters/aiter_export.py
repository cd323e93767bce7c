"""flyconfigs' aiter tables back as aiter's own CSVs.

Each upstream file comes back whole at its path under the output folder
(``OUT/aiter/configs/a8w8_blockscale_tuned_gemm.csv``,
``OUT/aiter/configs/model_configs/…csv``): the rows of every table imported from it, of
every device, in the file's column order (``layout``) and line order (``entries``), the
device columns written from the table's device (``gfx`` or ``arch`` its arch) and key
(``cu_num``).  A table made without an upstream file is written as the family's default
file.  aiter reads a family's files through its ``AITER_CONFIG_*`` variable, several
joined by ``:`` (:func:`aiter_environment`).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flyconfigs.adapters.spelling import csv_line, csv_text_reads_as, with_ending
from flyconfigs.errors import ArtifactError, FieldProblem
from flyconfigs.kernels.aiter_family import AiterFamily
from flyconfigs.kernels.aiter_gemm import FAMILIES
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.schema.canonical import canonical_text
from flyconfigs.schema.jsonio import write_atomic
from flyconfigs.schema.table import Table

__all__ = ["ExportedFile", "aiter_environment", "export_aiter", "render_cell"]

_LINE = re.compile(r"^line ([0-9]+)$")
_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.=,+-]*(/[A-Za-z0-9_][A-Za-z0-9_.=,+-]*)*\.csv$")


@dataclass(frozen=True)
class ExportedFile:
    """One CSV written: where, for which family, how many rows."""

    path: Path
    upstream: str
    family: AiterFamily
    rows: int


def render_cell(value: Any) -> str:
    """A cell as aiter's own files write it: ``True``/``False``, an empty cell for none."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    return repr(value) if isinstance(value, float) else str(value)


@dataclass
class _File:
    """One CSV being written: its family, columns, head and line ending (the first table's),
    and its records by line number (rows and the lines no row holds)."""

    family: AiterFamily
    header: list[str]
    head: str
    newline: str
    records: list[tuple[int, str]]
    rows: int = 0
    kept: set[str] | None = None


def _rows(table: Table, file: _File, seen: set[tuple[str, str]]) -> None:
    spelling = table.spelling if table.spelling is not None and table.spelling.format == "csv" else None
    for index in range(len(table.rows)):
        key = table.key_of(index)
        slot = (table.device.arch, canonical_text(key))
        if slot in seen:  # an earlier source has this key: the search serves its row, not this one
            continue
        seen.add(slot)
        cells = {**key, **table.config_of(index), **table.measured_of(index)}
        cells[file.family.arch_column] = table.device.arch
        entry = table.entry_of(index)
        line = _LINE.match(entry)
        rendered = [render_cell(cells.get(c)) for c in file.header]
        text = csv_line(rendered, file.newline)
        own = spelling.texts.get(entry) if spelling is not None else None
        if own is not None and csv_text_reads_as(own, file.header, rendered):
            text = own  # the file's own spelling of this very row
        file.records.append((int(line.group(1)) if line else index, text))
        file.rows += 1
    if spelling is not None:
        kept = file.kept if file.kept is not None else set()
        file.kept = kept
        for unserved in spelling.unserved:  # kept with its table, once (a line of no device is in every table)
            line = _LINE.match(unserved.entry)
            if line and unserved.entry not in kept:
                kept.add(unserved.entry)
                file.records.append((int(line.group(1)), unserved.text))


def _text(file: _File) -> str:
    """The file: its head, then its records in line order, each but the last ended by a
    line ending (a record that was the last of its file may have none)."""
    records = [text for _, text in sorted(file.records, key=lambda pair: pair[0])]
    pieces = [file.head, *records]
    return "".join(with_ending(piece, file.newline) if i < len(pieces) - 1 else piece for i, piece in enumerate(pieces))


def export_aiter(tables: Iterable[Table], out: str | Path, problems: ProblemLog | None = None) -> list[ExportedFile]:
    """Write every aiter table of ``tables`` (in precedence order, as
    :func:`~flyconfigs.registry.installed.installed_tables` gives them) into ``out`` as
    aiter's CSVs (module docstring), each atomically; the files written, sorted by path.
    A table of another kernel is left out.  Tables of one upstream file are merged as the
    search serves them: of rows with one device and key, the first table's; the rest
    of every table kept (your own copy of a shipped file overrides the shipped rows it
    has, not the others).  A table whose columns are the first one's in another order
    is written in the first one's order.  Where a table has a ``spelling`` (schema 1.8)
    the file comes back as its upstream file was: the first table's header line and line
    ending, each row's own text where it reads back as the row (:func:`csv_text_reads_as`),
    and the lines no row holds, in their places.  A table that cannot be written (an upstream
    path that is not a safe relative path, other columns than the file's first table)
    is reported to ``problems`` (``invalid-artifact``) and left out, the others
    written; without ``problems`` it raises :class:`ArtifactError`."""
    files: dict[str, _File] = {}
    seen: dict[str, set[tuple[str, str]]] = {}
    for table in tables:
        family = FAMILIES.get(table.kernel.name)
        if family is None:
            continue
        source = table.provenance.source
        upstream = source.file if source is not None else f"aiter/configs/{family.stems[0]}.csv"
        header = list(table.layout) if table.layout else [
            family.arch_column, *table.columns.key, *table.columns.config, *table.columns.measured]
        why: FieldProblem | None = None
        if not _SAFE.match(upstream) or ".." in upstream.split("/"):
            why = FieldProblem("provenance.source.file", "not a safe relative path")
        elif upstream in files and sorted(files[upstream].header) != sorted(header):
            why = FieldProblem("layout", f"tables of one file with other columns: {','.join(files[upstream].header)} "
                                         f"and {','.join(header)}")
        if why is not None:
            if problems is None:
                raise ArtifactError(upstream, [why])
            problems.report(Problem("invalid-artifact", f"{table.kernel.name} table of {upstream} for "
                                    f"{table.device.identity.describe()}", f"{why.field}: {why.message}; not exported"))
            continue
        if upstream not in files:
            spelling = table.spelling if table.spelling is not None and table.spelling.format == "csv" else None
            newline = spelling.newline if spelling is not None else "\n"
            head = csv_line(header, newline)
            if spelling is not None and spelling.head is not None and _reads_as_header(spelling.head, header):
                head = spelling.head
            files[upstream] = _File(family, header, head, newline, [])
        _rows(table, files[upstream], seen.setdefault(upstream, set()))
    written = []
    for upstream, file in sorted(files.items()):
        path = write_atomic(Path(out) / upstream, _text(file).encode("utf-8"))
        written.append(ExportedFile(path, upstream, file.family, file.rows))
    return written


def _reads_as_header(text: str, header: list[str]) -> bool:
    """Whether ``text`` (a byte-order mark aside) is one record naming ``header``."""
    try:
        rows = list(csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline="")))
    except csv.Error:
        return False
    return rows == [header]


def aiter_environment(files: Iterable[ExportedFile]) -> dict[str, str]:
    """Each family's ``AITER_CONFIG_*`` setting for ``files``: its files joined by ``:``,
    the default file (``aiter/configs/<stem>.csv``) first, which aiter merges as it merges
    its own default and model files."""
    by_env: dict[str, list[ExportedFile]] = {}
    for file in files:
        if file.family.env is not None:
            by_env.setdefault(file.family.env, []).append(file)
    return {env: ":".join(str(f.path) for f in sorted(found, key=lambda f: ("model_configs" in f.upstream, f.upstream)))
            for env, found in sorted(by_env.items())}
