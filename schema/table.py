"""The table form (schema 1.6): many keyed rows of one kernel, device and provenance.

Upstream configs come as tables (a vLLM file maps batch sizes to configs, an aiter CSV
has thousands of rows), and one artifact per row is the wrong shape for them.  A
:class:`Table` is one document with ``"form": "table"``: the kernel, the device, the
selection and the provenance once, the column names once (``columns.key``,
``columns.config`` and ``columns.measured``), and one compact row per key: its key
cells, its winner's config cells and, where the source has them, its measurements
(``us``, ``tflops``, ``err_ratio`` …, ``null`` where a row has none).

Each row means exactly what one artifact means: :meth:`Table.row_artifact` gives it, and
the registry serves a table's rows as it serves artifacts.  Cells are scalars (a config
whose values are lists is an artifact, not a row); rows are unique by key; ``entries``
(optional) names each row's place in the upstream file (``line 12``); ``layout``
(optional) is the upstream file's column order, for exporters; ``spelling`` (optional,
1.8, :class:`Spelling`) is how the upstream file wrote what the table holds, so that an
exporter gives the file back byte for byte: presentation only, never served nor read as a
config.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, TypeAdapter, WithJsonSchema, model_validator

from flyconfigs.schema.canonical import canonical_bytes, sha256_hex
from flyconfigs.schema.models import (
    AxisName,
    Device,
    KernelRef,
    Provenance,
    Scalar,
    SchemaVersion,
    Selection,
    Text,
    _is_none,
    _Model,
)

__all__ = [
    "MAX_TABLE_ROWS",
    "TABLE_FORM",
    "Spelling",
    "Table",
    "TableColumns",
    "Unserved",
    "is_table_document",
    "table_file_name",
]

TABLE_FORM = "table"
MAX_TABLE_ROWS = 1_000_000
"""A table holds at most this many rows (the 8 MiB document bound comes first in practice)."""

_ROW_SCHEMA = TypeAdapter(Annotated[list[Scalar], Field(max_length=512)]).json_schema()
Row = Annotated[list[Any], Field(max_length=512), WithJsonSchema(_ROW_SCHEMA)]
"""One row's cells, each a scalar (:data:`~flyconfigs.schema.models.Scalar`: bool, 64-bit
int, finite float, string of at most 1024 characters, null), checked by
:meth:`Table._rows_fit` in one pass: a table holds thousands of rows, and that check costs
a third of the scalar union's validation."""
_LIMIT = 2**63


def _is_empty(value: object) -> bool:
    return not value

_SCALAR_TYPES = {bool, int, float, str, type(None)}


def _cell_fits(cell: object) -> bool:
    kind = type(cell)
    if kind is int:
        return -_LIMIT <= cell < _LIMIT  # type: ignore[operator]
    if kind is str:
        return len(cell) <= 1024  # type: ignore[arg-type]
    if kind is float:
        return math.isfinite(cell)  # type: ignore[arg-type]
    return kind is bool or cell is None


def _rows_plainly_fit(rows: list[list[Any]], width: int, keys: int) -> bool:
    """Whether every row has ``width`` scalar cells and a key of its own, checked a whole
    column at a time (a table has hundreds of thousands of cells, and a column is mostly of
    one type: its bounds are then one ``min``/``max``); when not, :func:`_find_misfit`
    names the first that does not."""
    if set(map(len, rows)) != {width}:
        return False
    columns = list(zip(*rows, strict=True))
    if not all(map(_column_fits, columns)):
        return False
    # A null key cell is a nullable axis's null (vLLM's file without a dtype), as in an
    # artifact's key: the kernel's check_key says whether its axis takes it.
    # Keys that differ as values differ as typed values too (the converse is checked by
    # _find_misfit: 1 and True are equal values but two keys).
    return len(set(zip(*columns[:keys], strict=True))) == len(rows)


def _column_fits(column: tuple[Any, ...]) -> bool:
    """Whether every cell of ``column`` is a scalar within the bounds of :func:`_cell_fits`."""
    kinds = set(map(type, column))
    if not kinds <= _SCALAR_TYPES:
        return False

    def of(kind: type) -> Sequence[Any]:
        if kind not in kinds:
            return ()
        # The common case, a column of one type: its bounds over the column as it is.
        return column if len(kinds) == 1 else [c for c in column if type(c) is kind]

    ints, texts = of(int), of(str)
    if ints and (min(ints) < -_LIMIT or max(ints) >= _LIMIT):
        return False
    if texts and max(map(len, texts)) > 1024:
        return False
    return all(map(math.isfinite, of(float)))


def _find_misfit(rows: list[list[Any]], width: int, key: list[str]) -> None:
    """Raise ``ValueError`` naming the first row or cell that does not fit (a row of
    another width, a cell that is not a scalar, a key seen before); return
    when every one fits."""
    seen: dict[tuple[object, ...], int] = {}
    for index, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"rows[{index}]: {len(row)} cells, the columns name {width}")
        for offset, cell in enumerate(row):
            if not _cell_fits(cell):
                raise ValueError(f"rows[{index}][{offset}]: a cell is a bool, a 64-bit int, a finite number, a "
                                 f"string of at most 1024 characters or null, got {cell!r}")
        # Typed, as canonical JSON would tell them apart: 1, 1.0 and true are three keys.
        slot = tuple((type(cell), cell) for cell in row[:len(key)])
        if slot in seen:
            raise ValueError(f"rows[{index}]: the same key as rows[{seen[slot]}]")
        seen[slot] = index


class TableColumns(_Model):
    """The names of a table's columns, in the order of each row's cells: the key axes,
    then the config's tunables, then the measurements."""

    key: Annotated[list[AxisName], Field(min_length=1, max_length=64)]
    config: Annotated[list[AxisName], Field(max_length=256)]
    measured: Annotated[list[AxisName], Field(max_length=64)] = []

    @model_validator(mode="after")
    def _unique(self) -> TableColumns:
        names = [*self.key, *self.config, *self.measured]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"columns: {', '.join(twice)} named twice")
        return self

    @property
    def width(self) -> int:
        """The number of cells of every row."""
        return len(self.key) + len(self.config) + len(self.measured)


SpelledText = Annotated[str, StringConstraints(max_length=65536)]
"""An upstream file's text for one entry, its head or its tail, exactly as the file has it."""


class Unserved(_Model):
    """An entry of the upstream file that is no row of the table (a row aiter never
    serves, one flyconfigs cannot represent, a blank line): its text, kept to be given back,
    and why it is not served."""

    entry: Text
    text: SpelledText
    why: Annotated[str, StringConstraints(min_length=1, max_length=4096)]


class Spelling(_Model):
    """How the upstream file spelled what the table holds (1.8), for exporters only.

    The file is ``head``, then each entry's text in the file's order, then ``tail``.  An
    entry's text is what an exporter writes for the entry's row in the standard form
    (``format``: an aiter CSV line ended by ``newline``; a vLLM JSON member indented by
    ``indent``) unless ``texts`` holds the file's own text for it (a number written
    ``7.780``, a short row, a member laid out another way).  ``head`` and ``tail`` are
    ``None`` where the standard (CSV: the header line; JSON: ``{`` and a closing brace and
    final newline) is the file's.  ``order`` (JSON) lists every member of the file in its
    order, those no row of the table holds among them; ``unserved`` keeps the entries
    that are no row.  An exporter uses a text only where it reads back as the row it
    writes, so the spelling never changes what is served or exported as data."""

    format: Literal["csv", "json"]
    newline: Literal["\n", "\r\n", "\r"] = "\n"
    indent: Annotated[Annotated[int, Field(ge=0, le=16)] | None, Field(exclude_if=_is_none)] = None
    head: Annotated[SpelledText | None, Field(exclude_if=_is_none)] = None
    tail: Annotated[SpelledText | None, Field(exclude_if=_is_none)] = None
    order: Annotated[Annotated[list[Text], Field(max_length=MAX_TABLE_ROWS)] | None, Field(exclude_if=_is_none)] = None
    texts: Annotated[dict[Text, SpelledText], Field(max_length=MAX_TABLE_ROWS, exclude_if=_is_empty)] = {}
    unserved: Annotated[list[Unserved], Field(max_length=MAX_TABLE_ROWS, exclude_if=_is_empty)] = []

    @model_validator(mode="after")
    def _shape(self) -> Spelling:
        if (self.format == "json") != (self.indent is not None):
            raise ValueError("indent: a JSON file's spelling names its indent, a CSV file's none")
        if self.format == "csv" and self.order is not None:
            raise ValueError("order: a CSV file's entries are in line order")
        if self.order is not None and len(set(self.order)) != len(self.order):
            raise ValueError("order: an entry is named twice")
        seen = [u.entry for u in self.unserved]
        if len(set(seen)) != len(seen):
            raise ValueError("unserved: an entry is named twice")
        return self


class Table(_Model):
    """One kernel on one device: many keys, each row its winner (schema 1.6); or, from
    1.8, none: the spelling of an upstream file that holds no row (aiter's header-only
    files), kept so that an export gives it back."""

    schema_version: SchemaVersion
    form: Literal["table"]
    kernel: KernelRef
    device: Device
    columns: TableColumns
    rows: Annotated[list[Row], Field(max_length=MAX_TABLE_ROWS)]
    """At least one, but in a table that keeps an upstream file holding no row (1.8: its
    ``spelling`` gives the file back; it serves nothing)."""
    entries: Annotated[Annotated[list[Text], Field(max_length=MAX_TABLE_ROWS)] | None, Field(exclude_if=_is_none)] = None
    """Each row's place in the upstream file (``line 12``, ``"64"``), in row order."""
    layout: Annotated[Annotated[list[Text], Field(min_length=1, max_length=512)] | None,
                      Field(exclude_if=_is_none)] = None
    """The upstream file's columns in its order (those of ``columns`` and the device's,
    such as aiter's ``cu_num``), so an exporter writes the file as its project does."""
    spelling: Annotated[Spelling | None, Field(exclude_if=_is_none)] = None
    """How the upstream file wrote what the table holds (1.8): presentation only."""
    selection: Selection
    provenance: Provenance

    @model_validator(mode="after")
    def _rows_fit(self) -> Table:
        if int(self.schema_version.split(".")[1]) < 6:
            raise ValueError(f"schema_version: the table form begins with 1.6, got {self.schema_version!r}")
        if not _rows_plainly_fit(self.rows, self.columns.width, len(self.columns.key)):
            _find_misfit(self.rows, self.columns.width, self.columns.key)
        if self.entries is not None and len(self.entries) != len(self.rows):
            raise ValueError(f"entries: {len(self.entries)} entries for {len(self.rows)} rows")
        if self.spelling is not None:
            self._spelling_fits(self.spelling)
        if not self.rows and self.spelling is None:
            raise ValueError("rows: a table holds at least one row, or (1.8) keeps the spelling of an upstream file "
                             "that holds none")
        if self.selection.rule == "predicted" and self.provenance.model is None:
            raise ValueError("provenance.model: a predicted selection names the model that ranked it")
        if self.provenance.source is not None and self.selection.rule != "imported":
            raise ValueError("provenance.source: only an imported selection names an upstream source")
        return self

    def _spelling_fits(self, spelling: Spelling) -> None:
        if int(self.schema_version.split(".")[1]) < 8:
            raise ValueError(f"spelling: begins with schema 1.8, got {self.schema_version!r}")
        entries = set(self.entries or ())
        if self.entries is None or len(entries) != len(self.entries):
            raise ValueError("spelling: needs entries, each naming one row's place upstream")
        known = entries if spelling.order is None else set(spelling.order)
        if spelling.order is not None and not entries <= known:
            raise ValueError("spelling.order: every row's entry is in the file's order")
        stray = sorted(set(spelling.texts) - known)
        if stray:
            raise ValueError(f"spelling.texts: {stray[0]!r} is no entry of the file")
        both = sorted(entries & {u.entry for u in spelling.unserved})
        if both:
            raise ValueError(f"spelling.unserved: {both[0]!r} is a row of the table")

    @property
    def created(self) -> str | None:
        """When the table was made (every row's time)."""
        return self.provenance.created

    def key_of(self, index: int) -> dict[str, Any]:
        """Row ``index``'s key."""
        return dict(zip(self.columns.key, self.rows[index], strict=False))

    def config_of(self, index: int) -> dict[str, Any]:
        """Row ``index``'s winner."""
        start = len(self.columns.key)
        return dict(zip(self.columns.config, self.rows[index][start:], strict=False))

    def measured_of(self, index: int) -> dict[str, Any]:
        """Row ``index``'s measurements, those it has (a ``null`` cell is none)."""
        start = len(self.columns.key) + len(self.columns.config)
        return {name: value for name, value in zip(self.columns.measured, self.rows[index][start:], strict=False)
                if value is not None}

    def entry_of(self, index: int) -> str:
        """Row ``index``'s place upstream, or ``row <index>`` of this table."""
        return self.entries[index] if self.entries is not None else f"row {index}"

    def row_artifact_data(self, index: int) -> dict[str, Any]:
        """Row ``index`` as an artifact document (validate it with the artifact model):
        one candidate, the winner, the table's selection and provenance; an imported
        row names its entry and carries its measurements as the source's ``reported``
        figures, any other row its measurements nowhere (a row is never a timing)."""
        config = self.config_of(index)
        status = "compiled" if self.selection.rule == "predicted" else "ok"
        provenance = self.provenance.model_dump(mode="json")
        if self.provenance.source is not None:
            provenance["source"] = {**provenance["source"], "entry": self.entry_of(index),
                                    "reported": {**provenance["source"]["reported"], **self.measured_of(index)}}
        return {
            "schema_version": self.schema_version, "kernel": self.kernel.model_dump(mode="json"),
            "device": self.device.model_dump(mode="json"), "key": self.key_of(index),
            "candidates": [{"config": config, "status": status}], "winner": {"config": config},
            "selection": self.selection.model_dump(mode="json"), "provenance": provenance,
        }

    def file_name(self) -> str:
        """``<kernel>-<arch>-table-<16 hex>.json``: the hash of the kernel, the device
        identity and the upstream file (or, without one, the keys), stable and file-name safe."""
        source = self.provenance.source
        what: object = source.file if source is not None else [r[:len(self.columns.key)] for r in self.rows]
        identity = {"kernel": self.kernel.name, "device": self.device.identity.model_dump(mode="json"), "of": what}
        return table_file_name(self.kernel.name, self.device.arch, sha256_hex(canonical_bytes(identity))[:16])

    def to_json_bytes(self) -> bytes:
        """The canonical JSON of this table plus a final newline (what is written)."""
        return canonical_bytes(self.model_dump(mode="json")) + b"\n"

    def content_hash(self) -> str:
        """sha256 of the canonical JSON (without the final newline)."""
        return sha256_hex(canonical_bytes(self.model_dump(mode="json")))


def table_file_name(kernel: str, arch: str, digest: str) -> str:
    """``<kernel>-<arch>-table-<digest>.json``."""
    return f"{kernel.lstrip('.')}-{arch}-table-{digest}.json"


def is_table_document(data: object) -> bool:
    """Whether a parsed document says it is a table (``"form": "table"``)."""
    return isinstance(data, dict) and data.get("form") == TABLE_FORM
