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


def _rows(table: Table, family: AiterFamily, header: list[str]) -> list[tuple[int, list[str]]]:
    out = []
    for index in range(len(table.rows)):
        cells = {**table.key_of(index), **table.config_of(index), **table.measured_of(index)}
        cells[family.arch_column] = table.device.arch
        line = _LINE.match(table.entry_of(index))
        out.append((int(line.group(1)) if line else index, [render_cell(cells.get(c)) for c in header]))
    return out


def export_aiter(tables: Iterable[Table], out: str | Path) -> list[ExportedFile]:
    """Write every aiter table of ``tables`` into ``out`` as aiter's CSVs (module
    docstring), each atomically; the files written, sorted by path.  A table of another
    kernel is left out.  Raises :class:`ArtifactError` for an upstream path that is not a
    safe relative path, or tables of one file whose column orders differ."""
    files: dict[str, tuple[AiterFamily, list[str], list[tuple[int, list[str]]]]] = {}
    for table in tables:
        family = FAMILIES.get(table.kernel.name)
        if family is None:
            continue
        source = table.provenance.source
        upstream = source.file if source is not None else f"aiter/configs/{family.stems[0]}.csv"
        if not _SAFE.match(upstream) or ".." in upstream.split("/"):
            raise ArtifactError(upstream, [FieldProblem("provenance.source.file", "not a safe relative path")])
        header = list(table.layout) if table.layout else [
            family.arch_column, *table.columns.key, *table.columns.config, *table.columns.measured]
        found = files.setdefault(upstream, (family, header, []))
        if found[1] != header:
            raise ArtifactError(upstream, [FieldProblem("layout", f"tables of one file with two column orders: "
                                                        f"{','.join(found[1])} and {','.join(header)}")])
        found[2].extend(_rows(table, family, header))
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
