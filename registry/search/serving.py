"""Small pieces of what a search serves: the found artifact, what an adaptation of a
nearer key's winner changed, and how the record names an artifact's selection."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from flyconfigs.registry.core.axes import KeyValue
from flyconfigs.registry.search.records import Neighbourhood
from flyconfigs.registry.sources.entries import Entry

__all__ = ["ROUTINE", "Found", "changes", "how", "selection_of"]

ROUTINE = "its winner does not fit this key"
"""The reason a nearer tuned key is passed over for a routine cause."""


@dataclass(frozen=True)
class Found:
    """What one step serves: the entry, its artifact, the config, the winner as tuned
    when the kernel adapted it to the asked key, the key's distance (empty for an
    exact key) and, where the family's neighbourhood rule chose the config, the record
    of it."""

    entry: Entry
    artifact: Any
    config: dict[str, KeyValue]
    adapted_from: dict[str, KeyValue] | None
    distance: tuple[float, ...] = ()
    neighbourhood: Neighbourhood | None = None
    """Set when the family's neighbourhood rule chose ``config``."""

    @property
    def predicted(self) -> bool:
        """Whether the served winner was predicted rather than measured."""
        return bool(self.artifact.selection.rule == "predicted")


def selection_of(artifact: Any) -> Literal["measured", "predicted", "imported"]:
    """How the record names ``artifact``'s selection."""
    rule = artifact.selection.rule
    if rule == "predicted":
        return "predicted"
    return "imported" if rule == "imported" else "measured"


def how(artifact: Any) -> str:
    """What ``explain`` says of an artifact that was not measured on its device."""
    if artifact.selection.rule == "predicted":
        model = artifact.provenance.model
        return f"predicted (not measured on this device; model {model.name} {model.version})" if model else "predicted"
    return "imported (measured by another tool)"


def changes(before: Mapping[str, KeyValue], after: Mapping[str, KeyValue]) -> str:
    """``vector_bytes 16 -> 4``: what an adaptation changed."""
    names = [n for n in {**before, **after} if before.get(n) != after.get(n)]
    return ", ".join(f"{n} {before.get(n)!r} -> {after.get(n)!r}" for n in names) or "nothing"
