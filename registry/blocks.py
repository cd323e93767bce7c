"""A read table's rows in a catalog index: one :class:`TableBlock` per table and source,
in the table's place among the other entries, matched through the table's own index of
keys (:meth:`~flyconfigs.registry.tables.TableRef.row_of`,
:meth:`~flyconfigs.registry.tables.TableRef.signed`) so that a table of thousands of rows
costs a search the rows it weighs, not one entry per row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from flyconfigs.registry.sources import Entry, Source
from flyconfigs.registry.tables import TableRef
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
    _made: dict[int, Entry] = field(default_factory=dict, repr=False)

    @property
    def kernel(self) -> str:
        """The table's kernel."""
        return self.ref.kernel

    @property
    def device(self) -> DeviceIdentity:
        """The table's device."""
        assert self.ref.table is not None
        return self.ref.table.device.identity

    @property
    def created(self) -> str | None:
        """When the table was made (every row's time)."""
        assert self.ref.table is not None
        return self.ref.table.provenance.created

    def base_source(self) -> Source:
        """The source as found, before it was ranked for a family."""
        return self.ref.source

    def ranked(self, source: Source) -> TableBlock:
        """These rows as ``source`` (their source ranked for one family) offers them."""
        return TableBlock(self.ref, source)

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
