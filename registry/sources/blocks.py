"""A table's rows in a catalog index: one :class:`TableBlock` per table and source, put
under its device's tokens before the table is read, read when a search step first weighs
that token's entries, and matched through the table's own index of
keys (:meth:`~flyconfigs.registry.sources.tables.TableRef.row_of`,
:meth:`~flyconfigs.registry.sources.tables.TableRef.signed`) so that a table of thousands of rows
costs a search the rows it weighs, not one entry per row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.sources.entries import Entry, Source

if TYPE_CHECKING:  # a resolve that meets no table never imports the table's modules
    from flyconfigs.registry.sources.tables import TableRef
    from flyconfigs.schema.models import DeviceIdentity

__all__ = ["TableBlock"]


@dataclass(eq=False)
class TableBlock:
    """A read table's rows as one source offers them (ranked for one family), in a
    catalog index in their place among the other entries: a row is made an entry only
    when a search matches it, once per block, so that a search that tries it once (it
    tells entries by identity) never tries it again in another step."""

    ref: TableRef
    source: Source
    problems: ProblemLog = field(repr=False)
    """Where a table that fails a check when it is read is reported."""
    _made: dict[int, Entry] = field(default_factory=dict, repr=False)

    @property
    def kernel(self) -> str:
        """The table's kernel."""
        return self.ref.kernel

    @property
    def device(self) -> DeviceIdentity:
        """The table's device, known before the table is read (its manifest row says it,
        and reading checks it)."""
        return self.ref.device

    def ready(self) -> bool:
        """Whether the table is read and valid (read now, on the first call: a table whose
        device no step of a search reaches is never read)."""
        return self.ref.read(self.problems) is not None

    @property
    def created(self) -> str | None:
        """When the table was made (every row's time; the table read)."""
        assert self.ref.table is not None
        return self.ref.table.created

    def base_source(self) -> Source:
        """The source as found, before it was ranked for a family."""
        return self.ref.source

    def ranked(self, source: Source) -> TableBlock:
        """These rows as ``source`` (their source ranked for one family) offers them."""
        return TableBlock(self.ref, source, self.problems)

    def row_of(self, key: Mapping[str, object], text: str) -> int | None:
        """The row whose key is ``key`` (of canonical text ``text``), or ``None``."""
        return self.ref.row_of(key, text)

    def entry(self, row: int) -> Entry:
        """Row ``row`` as this block's source offers it (made on first use)."""
        made = self._made.get(row)
        if made is None:
            base = self.ref.row_entry(row)
            made = self._made.setdefault(row, base if self.source is base.source else base.ranked(self.source))
        return made
