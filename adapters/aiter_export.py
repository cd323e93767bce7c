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


def _rows(table: Table, family: AiterFamily, header: list[str], seen: set[tuple[str, str]]) -> list[tuple[int, list[str]]]:
    out = []
    for index in range(len(table.rows)):
        key = table.key_of(index)
        slot = (table.device.arch, canonical_text(key))
        if slot in seen:  # an earlier source has this key: the search serves its row, not this one
            continue
        seen.add(slot)
        cells = {**key, **table.config_of(index), **table.measured_of(index)}
        cells[family.arch_column] = table.device.arch
        line = _LINE.match(table.entry_of(index))
        out.append((int(line.group(1)) if line else index, [render_cell(cells.get(c)) for c in header]))
    return out


def export_aiter(tables: Iterable[Table], out: str | Path, problems: ProblemLog | None = None) -> list[ExportedFile]:
    """Write every aiter table of ``tables`` (in precedence order, as
    :func:`~flyconfigs.registry.installed.installed_tables` gives them) into ``out`` as
    aiter's CSVs (module docstring), each atomically; the files written, sorted by path.
    A table of another kernel is left out.  Tables of one upstream file are merged as the
    search serves them: of rows with one device and key, the first table's; the rest
    of every table kept (your own copy of a shipped file overrides the shipped rows it
    has, not the others).  A table whose columns are the first one's in another order
    is written in the first one's order.  A table that cannot be written (an upstream
    path that is not a safe relative path, other columns than the file's first table)
    is reported to ``problems`` (``invalid-artifact``) and left out, the others
    written; without ``problems`` it raises :class:`ArtifactError`."""
    files: dict[str, tuple[AiterFamily, list[str], list[tuple[int, list[str]]]]] = {}
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
        elif upstream in files and sorted(files[upstream][1]) != sorted(header):
            why = FieldProblem("layout", f"tables of one file with other columns: {','.join(files[upstream][1])} and "
                                         f"{','.join(header)}")
        if why is not None:
            if problems is None:
                raise ArtifactError(upstream, [why])
            problems.report(Problem("invalid-artifact", f"{table.kernel.name} table of {upstream} for "
                                    f"{table.device.identity.describe()}", f"{why.field}: {why.message}; not exported"))
            continue
        found = files.setdefault(upstream, (family, header, []))
        found[2].extend(_rows(table, family, found[1], seen.setdefault(upstream, set())))
    written = []
    for upstream, (family, header, rows) in sorted(files.items()):
        text = io.StringIO(newline="")
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(cells for _, cells in sorted(rows, key=lambda pair: pair[0]))
        path = write_atomic(Path(out) / upstream, text.getvalue().encode("utf-8"))
        written.append(ExportedFile(path, upstream, family, len(rows)))
    return written


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
