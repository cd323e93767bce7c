"""One upstream file's imported artifacts as one table (schema 1.6): the kernel, device,
selection and provenance once, a row per entry.

:func:`as_table` keeps what each artifact says: a row's key and winner are the artifact's,
its place upstream (``provenance.source.entry``) is the row's entry, and what the source
reported beside the config becomes the row's measurements.  Rows are kept in the file's
order.  An artifact that a row cannot hold stays an artifact, served beside the table:
one whose config sets other tunables than most of the file's (a table has one set of
config columns), or one with a list or object value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from flyconfigs.schema.load import parse_table
from flyconfigs.schema.models import SCHEMA_VERSION, Artifact
from flyconfigs.schema.table import TABLE_FORM, Table

__all__ = ["as_table"]


def _scalar(value: object) -> bool:
    return not isinstance(value, (list, dict))


def as_table(artifacts: Sequence[Artifact], file: str) -> tuple[Table | None, list[Artifact]]:
    """The table of ``artifacts`` (one file's, of one kernel, device and provenance but
    for each entry and its reported figures) and the artifacts left out of it; ``None``
    and all of them when no artifact fits a row.  Raises
    :class:`~flyconfigs.errors.ArtifactError` naming ``file`` if the table is invalid."""
    fits = [a for a in artifacts if all(_scalar(v) for v in (*a.key.values(), *a.winner.config.values()))]
    sets = Counter(frozenset(a.winner.config) for a in fits)
    if not sets:
        return None, list(artifacts)
    chosen = sets.most_common(1)[0][0]
    rows = [a for a in fits if frozenset(a.winner.config) == chosen]
    first = rows[0]
    columns = list(first.winner.config)  # the first row's order; a config's order means nothing
    measured = sorted({name for a in rows if a.provenance.source for name in a.provenance.source.reported})
    provenance = first.provenance.model_dump(mode="json")
    if provenance.get("source") is not None:
        provenance["source"] = {**provenance["source"], "entry": None, "reported": {}}
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "form": TABLE_FORM, "kernel": first.kernel.model_dump(mode="json"),
        "device": first.device.model_dump(mode="json"),
        "columns": {"key": list(first.key), "config": columns, "measured": measured},
        "rows": [[*a.key.values(), *(a.winner.config[c] for c in columns),
                  *((a.provenance.source.reported.get(m) if a.provenance.source else None) for m in measured)]
                 for a in rows],
        "entries": [(a.provenance.source.entry if a.provenance.source else None) or f"row {i}"
                    for i, a in enumerate(rows)],
        "selection": first.selection.model_dump(mode="json"), "provenance": provenance,
    }
    table, _ = parse_table(data, file)
    kept = {id(a) for a in rows}
    left = [a for a in artifacts if id(a) not in kept]
    return table, left
