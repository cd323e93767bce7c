"""Matching, as pure functions of their inputs: an exact key, the nearest key on a
kernel's ordinal axes, the order in which other products' artifacts are tried, and
collisions between sources (with their labels)."""

from __future__ import annotations

import logging
import math
import os

from flyconfigs.registry.declarations import KernelDecl, KeyValue
from flyconfigs.registry.problems import Problem, ProblemLog
from flyconfigs.registry.records import Collision
from flyconfigs.registry.sources import PACKAGES_ENV, Entry
from flyconfigs.schema.canonical import canonical_text, same_value

__all__ = ["by_product", "exact_matches", "find_collisions", "nearest_matches", "source_label"]


def exact_matches(pool: list[Entry], key: dict[str, KeyValue]) -> list[Entry]:
    """The entries of ``pool`` whose key is ``key``, in pool order."""
    wanted = canonical_text(key)
    return [e for e in pool if e.key == key and canonical_text(e.key) == wanted]


def by_product(pool: list[Entry], product: str | None) -> list[Entry]:
    """``pool`` in source order and, within each source, the products whose names share
    the longest prefix with ``product`` first (then by name): the order in which a step
    that accepts another product's artifacts tries them, so a device is served one
    product's tunings wherever that product has the key, not whichever file comes first."""
    asked = product or ""

    def order(entry: Entry) -> tuple[int, int, str]:
        name = entry.device.product or ""
        return entry.source.rank, -len(os.path.commonprefix([name, asked])), name

    return sorted(pool, key=order)


def nearest_matches(pool: list[Entry], key: dict[str, KeyValue], decl: KernelDecl) -> list[Entry]:
    """Entries equal to ``key`` on every exact axis, nearest first: the smallest sum over
    ordinal axes of ``|log2 a - log2 b|``, a tie to the larger tuned value, then pool order."""
    ordinal = [a.name for a in decl.key_axes if a.ordinal]
    if not ordinal:
        return []
    scored: list[tuple[float, tuple[float, ...], int, Entry]] = []
    for rank, entry in enumerate(pool):
        if entry.key.keys() != key.keys():
            continue
        if any(not same_value(entry.key[a.name], key[a.name]) for a in decl.key_axes if not a.ordinal):
            continue
        tuned = [entry.key[n] for n in ordinal]
        asked = [key[n] for n in ordinal]
        values = [v for v in tuned if type(v) is int]
        wanted = [v for v in asked if type(v) is int]
        if len(values) != len(ordinal) or len(wanted) != len(ordinal):
            continue
        distance = sum(abs(_log2(a) - _log2(b)) for a, b in zip(values, wanted, strict=True))
        scored.append((distance, tuple(-float(v) for v in values), rank, entry))
    scored.sort(key=lambda item: item[:3])
    return [item[3] for item in scored]


def _log2(value: int) -> float:
    return math.log2(max(value, 1))


def find_collisions(entries: list[Entry], problems: ProblemLog) -> list[Collision]:
    """Every group of entries for one kernel, device and key, the first by rank winning;
    each is reported once (INFO when someone chose the order, else WARNING)."""
    slots: dict[tuple[object, ...], list[Entry]] = {}
    for entry in entries:
        slots.setdefault(entry.slot(), []).append(entry)
    found = []
    for group in slots.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda e: e.source.rank)
        names = [source_label(e) for e in group]
        deliberate = group[0].source.kind == "override" or all(e.source.standing == "chosen" for e in group)
        collision = Collision(group[0].kernel, dict(group[0].key), group[0].device, names[0], tuple(names[1:]), deliberate)
        found.append(collision)
        problems.report(
            Problem(
                "collision",
                str(group[1].path),
                f"{group[0].kernel} {dict(group[0].key)} on {group[0].device.describe()}: "
                f"{names[0]} wins over {', '.join(names[1:])}"
                + ("" if deliberate else f" (nobody chose this order: rank packages with {PACKAGES_ENV})"),
            ),
            logging.INFO if deliberate else logging.WARNING,
        )
    return found


def source_label(entry: Entry) -> str:
    """``flyconfigs-sm90 2026.12.3 (file.json)`` for a package, the path for a folder."""
    if entry.source.kind == "package":
        return f"{entry.source.name} {entry.source.version} ({entry.path.name})"
    return str(entry.path)
