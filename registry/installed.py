"""Every table installed, as the aiter export reads them: :func:`installed_tables`."""

from __future__ import annotations

from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.search.catalog import Catalog
from flyconfigs.registry.sources.packs import PackRef
from flyconfigs.schema.table import Table

__all__ = ["installed_tables"]


def installed_tables(paths: list[str] | None, problems: ProblemLog) -> list[Table]:
    """Every valid table the registry would serve from (``FLYCONFIGS_PATH``, or ``paths``
    instead, and the installed data packages), read now, in precedence order (the first
    source's first).  Tables of one file name (the same kernel, device and upstream file:
    your own copy of a shipped CSV, say) are all returned: their rows are not copies of
    each other, and the search serves each key from the first source that has it, the
    other keys from the others.  Broken ones are reported to ``problems`` and left out."""
    catalog = Catalog(paths, problems)
    found: list[tuple[tuple[int, int], Table]] = []
    seen: set[int] = set()
    for target in catalog.all_targets():
        for ref in catalog.tables_for(target):
            if isinstance(ref, PackRef):  # a pack is tuned artifacts, not an upstream table
                continue
            ref.read(problems)
            if isinstance(ref.table, Table) and id(ref.table) not in seen:
                seen.add(id(ref.table))
                found.append((ref.source.rank, ref.table))
    found.sort(key=lambda pair: pair[0])  # stable: one source's tables keep their order
    return [table for _, table in found]
