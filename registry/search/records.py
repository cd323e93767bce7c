"""What a resolution answers with: the record of where a config came from, the steps an
explanation took, and the collisions between sources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from flyconfigs.registry.core.axes import KeyValue
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema.models import DeviceIdentity

__all__ = ["LAYER_NAMES", "Collision", "Layer", "Neighbourhood", "Resolution", "Step"]

Layer = Literal["exact", "same-compute-units", "same-arch", "default"]
LAYER_NAMES: tuple[Layer, Layer, Layer] = ("exact", "same-compute-units", "same-arch")


@dataclass(frozen=True)
class Neighbourhood:
    """Where a config the family's neighbourhood rule chose came from: the rule's
    ``reason``, the tuned keys it read (``neighbours``, nearest first), those whose
    artifacts timed the served config (``timed_at``) and of which it is the winner
    (``winner_at``), and, for a config none of them timed, whether it is the family's
    default for the asked key (``False`` for a timed one: where it was timed says where it
    came from)."""

    reason: str
    neighbours: tuple[Mapping[str, KeyValue], ...]
    timed_at: tuple[Mapping[str, KeyValue], ...]
    winner_at: tuple[Mapping[str, KeyValue], ...]
    default: bool

    def describe(self) -> str:
        """``the winner at M=4096 N=5120; timed at 2 of 3 neighbours; the default``."""
        parts = [f"the winner at {' and '.join(map(_key_text, self.winner_at))}"] if self.winner_at else []
        parts.append(f"timed at {len(self.timed_at)} of {len(self.neighbours)} neighbour key(s)")
        if self.default:
            parts.append("the family's default for this key")
        return "; ".join(parts)

    def as_json(self) -> dict[str, object]:
        """The record as plain JSON data."""
        return {"reason": self.reason, "neighbours": [dict(k) for k in self.neighbours],
                "timed_at": [dict(k) for k in self.timed_at], "winner_at": [dict(k) for k in self.winner_at],
                "default": self.default}


def _key_text(key: Mapping[str, KeyValue]) -> str:
    return " ".join(f"{k}={v}" for k, v in key.items())


@dataclass(frozen=True)
class Resolution:
    """A resolved config and where it came from.

    ``source`` is ``override``, ``package`` or ``default``; ``layer`` the device layer that
    matched; ``key_match`` ``exact``, ``nearest`` or ``none``; ``borrowed`` is true for a
    same-arch match, with ``matched_device`` the device it was tuned on; ``reasons`` the
    chain of steps that fell through before this answer.
    """

    kernel: str
    key: Mapping[str, KeyValue]
    device: DeviceQuery | None
    config: Mapping[str, KeyValue]
    source: Literal["override", "package", "default"]
    layer: Layer
    key_match: Literal["exact", "nearest", "none"]
    borrowed: bool = False
    matched_key: Mapping[str, KeyValue] | None = None
    matched_device: DeviceIdentity | None = None
    origin: str | None = None
    version: str | None = None
    file: str | None = None
    reasons: tuple[str, ...] = ()
    selection: Literal["measured", "predicted", "imported"] | None = None
    """How the served winner was chosen: timed on its device, ranked by a cost model
    from compiled resources, or imported from another tool; ``None`` for the default."""
    adapted_from: Mapping[str, KeyValue] | None = None
    """The winner of ``file`` as tuned, when the kernel adapted it to fit ``key`` (a
    nearer key's winner that did not fit as it was); ``config`` is what it became."""
    neighbourhood: Neighbourhood | None = None
    """Set when the family's neighbourhood rule (its ``choose_from_neighbours``) chose
    ``config`` from the measurements at the tuned keys around ``key``; ``matched_key``
    and ``file`` are then the nearest of them, whose standing the step served."""
    filled_in: Mapping[str, KeyValue] = field(default_factory=lambda: MappingProxyType({}))
    """The axes of ``key`` the call left out that the family filled in (the device's
    CU count, a natural default such as ``down=false``), as its ``spelled_key`` did."""

    def as_json(self) -> dict[str, object]:
        """The record as plain JSON data (for ``--json`` output)."""
        return {
            "kernel": self.kernel,
            "key": dict(self.key),
            "device": None if self.device is None else self.device.describe(),
            "config": dict(self.config),
            "source": self.source,
            "layer": self.layer,
            "key_match": self.key_match,
            "borrowed": self.borrowed,
            "matched_key": None if self.matched_key is None else dict(self.matched_key),
            "matched_device": None if self.matched_device is None else self.matched_device.model_dump(mode="json"),
            "origin": self.origin,
            "version": self.version,
            "file": self.file,
            "reasons": list(self.reasons),
            "selection": self.selection,
            "adapted_from": None if self.adapted_from is None else dict(self.adapted_from),
            "neighbourhood": None if self.neighbourhood is None else self.neighbourhood.as_json(),
            "filled_in": dict(self.filled_in),
        }


@dataclass(frozen=True)
class Collision:
    """Several sources hold an artifact for one kernel, device and key; ``winner`` serves.

    ``expected`` when someone chose the order: the winner is an override directory, or
    every package involved is ranked by ``FLYCONFIGS_PACKAGES``.  ``contested`` when the
    best rank is shared (then ``winner`` serves nothing either); ``standings`` says how
    each source, winner first, ranks for the kernel (see
    :mod:`flyconfigs.registry.resolve`)."""

    kernel: str
    key: Mapping[str, KeyValue]
    device: DeviceIdentity
    winner: str
    shadowed: tuple[str, ...]
    expected: bool = False
    contested: bool = False
    standings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """One step of an explanation: what was looked for and what happened."""

    looked_for: str
    outcome: str
