"""Tables in the catalog: one document of many keyed rows, served row by row exactly as
artifacts are (see :mod:`flyconfigs.schema.table`).

A :class:`TableRef` is a table a source offers, known by its kernel and device before a
row is read: a data package's manifest lists its tables with their kernel, device,
file and sha256, and an override directory's canonical tables are known by their heads
(:mod:`flyconfigs.registry.sources.folders`; another table is validated when the folder is
scanned).  The catalog reads a table (:meth:`TableRef.read`) only when its kernel is
resolved on its arch: then the file is read once, its hash checked, validated as a whole,
and its keys indexed by their cells.  A row becomes a :class:`TableRowEntry` (an
:class:`~flyconfigs.registry.sources.entries.Entry` whose artifact,
:meth:`~flyconfigs.schema.table.Table.row_artifact_data`, is made when the resolver first
tries it) only when a search matches it (:mod:`flyconfigs.registry.sources.blocks`), or when a
tool asks for every row (:meth:`TableRef.entries`).  A table that fails any check is
reported once and offers no row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from flyconfigs.registry.core.collector import collector_paused
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.sources.entries import Entry, Source, _Bad, _File, checked_document
from flyconfigs.schema.canonical import TextedDict, canonical_text, key_texts
from flyconfigs.schema.load import parse_table
from flyconfigs.schema.manifest import ManifestTable
from flyconfigs.schema.models import Artifact, DeviceIdentity
from flyconfigs.schema.pack import Pack
from flyconfigs.schema.table import Table

_Ref = TypeVar("_Ref", bound="TableRef")

__all__ = ["TableRef", "TableRowEntry"]


@dataclass(eq=False)
class TableRef:
    """A table a source offers: its kernel and device, where it is (``location``, relative
    to ``root`` for a package), and, for a package, the sha256 and row count its manifest
    states.  ``table`` is set once the file is read and valid."""

    kernel: str
    device: DeviceIdentity
    location: str
    source: Source
    sha256: str | None = None
    root: str | None = None
    rows: int | None = None
    table: Table | Pack | None = None
    _entries: list[Entry] | None = field(default=None, repr=False)
    _failed: bool = field(default=False, repr=False)
    _by_cells: dict[tuple[object, ...], int] = field(default_factory=dict, repr=False)
    _by_text: dict[str, int] | None = field(default=None, repr=False)
    _made: dict[int, TableRowEntry] = field(default_factory=dict, repr=False)
    _first: TableRowEntry | None = field(default=None, repr=False)
    _signed: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[tuple[object, ...], list[int]]] = field(
        default_factory=dict, repr=False)

    @classmethod
    def of_manifest(cls: type[_Ref], row: ManifestTable, source: Source, root: str) -> _Ref:
        """The table a package's manifest lists in ``row``."""
        return cls(row.kernel, row.device, row.file, source, row.sha256, root, row.rows)

    @property
    def path(self) -> Path:
        """The table's file."""
        return Path(self.root, self.location) if self.root is not None else Path(self.location)

    def read(self, problems: ProblemLog) -> Table | Pack | None:
        """The table, read, checked and its keys indexed on the first call; ``None`` (and
        one problem logged, once) for a table that is missing, unsafe, altered, invalid or
        not what its manifest says.  Two threads may both read it: each sets what it made
        before the mark of a finished read (``_first``), so neither sees half of it."""
        if self._first is None and not self._failed:
            with collector_paused():
                try:
                    table = self.table if self.table is not None else self._read()
                except _Bad as bad:
                    dist = self.source.name if self.source.kind == "package" else None
                    problems.report(Problem(bad.kind, str(self.path), bad.message, dist))
                    self._failed = True
                    return None
                rows, names = table.rows, table.columns.key
                self._by_cells = dict(zip([tuple(row[:len(names)]) for row in rows], range(len(rows)), strict=True))
                if len(self._by_cells) != len(rows):
                    # Keys equal as values but not as JSON (1 and true): by their canonical text.
                    self._by_text = dict(zip(key_texts(names, rows), range(len(rows)), strict=True))
                self.table = table
                self._first = TableRowEntry(self.kernel, {}, table.device.identity, self.location, self.source,
                                            root=self.root, rule=table.selection.rule,
                                            created=table.created, ref=self, row=0,
                                            _layer=table.device.identity.layers()[0])
        return None if self._failed else self.table

    def entries(self, problems: ProblemLog) -> list[Entry]:
        """One entry per row (:meth:`read` first); ``[]`` for a table :meth:`read` refuses."""
        if self._entries is None:
            table = self.read(problems)
            with collector_paused():
                self._entries = [] if table is None else [self.row_entry(i) for i in range(len(table.rows))]
        return self._entries

    def row_entry(self, row: int) -> TableRowEntry:
        """Row ``row`` as an entry of this table's source (the table read), made once: a
        search tells the entries it tried by identity."""
        made = self._made.get(row)
        if made is None:
            assert self.table is not None and self._first is not None
            # A copy of one made in full: a dataclass's initialisation costs more, and a
            # table has thousands of rows.
            key = TextedDict.__new__(TextedDict)  # filled here: the constructor would encode it again
            names = self.table.columns.key
            key.update(zip(names, self.table.rows[row][:len(names)], strict=True))
            key.text = canonical_text(dict(key))
            made = object.__new__(TableRowEntry)
            made.__dict__.update(self._first.__dict__)
            made.key, made.row, made._file = key, row, _File(None)
            made = self._made.setdefault(row, made)  # of two threads' copies, the first stored
        return made

    def row_of(self, key: Mapping[str, object], text: str) -> int | None:
        """The row (the table read) whose key is ``key``, whose canonical text is ``text``:
        looked up by its cells, then checked as JSON (``1``, ``1.0`` and ``true`` are
        three keys), or ``None``."""
        if self._by_text is not None:
            return self._by_text.get(text)
        assert self.table is not None
        names = self.table.columns.key
        try:
            row = self._by_cells.get(tuple(key[n] for n in names)) if len(key) == len(names) else None
        except (KeyError, TypeError):  # another axis, or a list value (no table cell is one)
            return None
        if row is None or canonical_text(dict(zip(names, self.table.rows[row], strict=False))) != text:
            return None
        return row

    def signed(self, ordinal: tuple[str, ...], exact: tuple[str, ...]) -> dict[tuple[object, ...], list[int]]:
        """The rows (the table read) a nearest-key step may weigh, by the signature an asked
        key must share with them (``matching._signature``: the key's axes and its JSON
        values on the ``exact`` axes); rows whose cells on the ``ordinal`` axes are not all
        ints are left out, as an artifact's key would be.  Made once per pair of axis
        lists, a column at a time, without an entry per row."""
        assert self.table is not None
        done = self._signed.get((ordinal, exact))
        if done is not None:
            return done
        names, rows = self.table.columns.key, self.table.rows
        by_cells: dict[tuple[str, ...], list[int]] = {}
        if all(n in names for n in (*ordinal, *exact)):
            texts = [_cell_texts([row[j] for row in rows]) for j in map(names.index, exact)]
            signatures = zip(*texts, strict=True) if texts else repeat((), len(rows))
            ordinals = [[row[j] for row in rows] for j in map(names.index, ordinal)]
            if all(set(map(type, column)) == {int} for column in ordinals):
                for index, signature in enumerate(signatures):
                    by_cells.setdefault(signature, []).append(index)
            else:
                usable = [all(type(v) is int for v in cells) for cells in zip(*ordinals, strict=True)]
                for index, (signature, ok) in enumerate(zip(signatures, usable, strict=False)):
                    if ok:
                        by_cells.setdefault(signature, []).append(index)
        axes = frozenset(names)
        return self._signed.setdefault((ordinal, exact), {(axes, *cells): found for cells, found in by_cells.items()})

    def row_artifact(self, row: int) -> Artifact:
        """Row ``row`` (the table read) as an artifact; :class:`_Bad` when the artifact
        model refuses it."""
        assert self.table is not None
        try:
            return Artifact.model_validate(self.table.row_artifact_data(row))
        except ValidationError as exc:  # a row the table form takes but an artifact does not
            raise _Bad("invalid-artifact", f"not an artifact as a row: {exc.errors()[0]['msg']}") from None

    def _read(self) -> Table | Pack:
        table = checked_document(self.path, self.root, self.sha256, parse_table)
        if (table.kernel.name, table.device.identity) != (self.kernel, self.device):
            raise _Bad("identity-mismatch", "the table's kernel or device differs from its manifest entry")
        if self.rows is not None and len(table.rows) != self.rows:
            raise _Bad("identity-mismatch", f"{len(table.rows)} rows, its manifest entry says {self.rows}")
        return table


@dataclass(eq=False)
class TableRowEntry(Entry):
    """One row of a table as an entry: its path is the table's with the row's place
    upstream (``…json#line 12``), and its artifact is the row's."""

    ref: TableRef | None = None
    row: int = 0
    _layer: tuple[object, ...] | None = field(default=None, repr=False)
    _slot: tuple[object, ...] | None = field(default=None, repr=False)

    def slot(self) -> tuple[object, ...]:
        """As :meth:`Entry.slot`, computed once: the row's device is its table's."""
        if self._slot is None:
            self._slot = (self.kernel, self._layer or self.device.layers()[0], canonical_text(self.key))
        return self._slot

    def place(self) -> tuple[object, int | None]:
        """The table (every row of one table read gives the same value) and this row's index."""
        return (id(self.ref), self.row) if self.ref is not None else super().place()

    def ranked(self, source: Source) -> Entry:
        """This row as ``source`` offers it, sharing its file (a plain copy: a table's
        thousands of rows are ranked at once, and ``dataclasses.replace`` re-runs every
        field's initialisation)."""
        copied = object.__new__(TableRowEntry)
        copied.__dict__.update(self.__dict__)
        copied.source = source
        return copied

    @property
    def path(self) -> Path:
        """The table file, ``#`` the row's entry (the row's place upstream, or ``row N``)."""
        assert self.ref is not None and self.ref.table is not None
        return Path(f"{self.ref.path}#{self.ref.table.entry_of(self.row)}")

    def _read(self) -> Artifact:
        assert self.ref is not None
        return self.ref.row_artifact(self.row)


def _cell_texts(column: list[object]) -> list[str]:
    """Each cell's canonical text; a column of ints, strings and nulls writes each distinct
    value once (there, values equal in Python are equal as JSON)."""
    if set(map(type, column)) <= {int, str, type(None)}:
        memo = {value: canonical_text(value) for value in set(column)}
        return list(map(memo.__getitem__, column))
    return list(map(canonical_text, column))
