"""What the registry hands a family's rules about the tuned keys it weighs: a :class:`Tie`
(one of several equally near keys, for ``tie_rank``) and a :class:`Neighbour` (a tuned key
and what it timed, for ``choose_from_neighbours``), with :func:`file_order` and
:func:`config_token`.  Plain values: this module imports nothing of the search, so the
contract (:class:`~flyconfigs.registry.families.contract.KernelDecl`) can name them."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from flyconfigs.registry.core.problems import ProblemLog

if TYPE_CHECKING:
    from flyconfigs.schema.models import Artifact

__all__ = ["Neighbour", "Tie", "Timings", "file_order", "config_token"]

KeyValue = Any
Timings = tuple[tuple[Mapping[str, KeyValue], float], ...]
_Slot = tuple[tuple[str, str, KeyValue], ...]



class _Offered(Protocol):
    """What a :class:`Tie` reads of its entry (:class:`~flyconfigs.registry.sources.entries.Entry`)."""

    @property
    def key(self) -> Mapping[str, KeyValue]: ...

    def place(self) -> tuple[object, int | None]: ...

    def load(self, problems: ProblemLog) -> Artifact | None: ...


class Tie:
    """One of several tuned keys of one standing equally near the asked key, as a
    family's ``tie_rank`` sees it.

    ``key`` is the tuned key, ``distance`` its ``key_distance`` from the asked one;
    ``file`` says which of the tie's files it comes from, numbered from 0 in the order the
    default meets them (by distance, then the sources' order): the rows of one table share
    one number, every artifact file has its own; ``row`` is its row in that table (an
    imported table keeps its upstream file's order), ``None`` for an artifact file.
    ``artifact`` is read on first use only."""

    __slots__ = ("_artifact", "_entry", "_problems", "_read", "distance", "file", "key", "row")

    def __init__(self, entry: _Offered, distance: tuple[float, ...], file: int, problems: ProblemLog) -> None:
        self.key: Mapping[str, KeyValue] = entry.key
        self.distance = distance
        self.file = file
        self.row: int | None = entry.place()[1]
        self._entry = entry
        self._problems = problems
        self._read = False
        self._artifact: Artifact | None = None

    @property
    def artifact(self) -> Artifact | None:
        """The key's artifact (its provenance and the figures its source reported), read
        now if not yet and kept with its entry (the search does not read it again); ``None``
        when it cannot be read, reported once as the search would."""
        if not self._read:
            self._artifact, self._read = self._entry.load(self._problems), True
        return self._artifact

    def __repr__(self) -> str:
        return f"Tie(key={dict(self.key)!r}, distance={self.distance!r}, file={self.file}, row={self.row})"


def file_order(tie: Tie) -> tuple[float, ...]:
    """The rank that serves equally near keys in their upstream file's order: the rows of
    one table by row, the earlier first; keys of different files (another table, an
    artifact beside it) in the default order of their files' first keys, never by row
    numbers of two files.  A framework that takes the first of its file's equally near
    entries (vLLM's ``min`` over the dict it read) answers this."""
    return (float(tie.file), float(tie.row if tie.row is not None else 0))


@dataclass(frozen=True)
class Neighbour:
    """One tuned key offered to a family's neighbourhood rule: its key, its distance from
    the asked key (the family's ``key_distance``), its winner, and every candidate its
    artifact timed (status ``ok``) as ``(config, median µs)``, fastest first; configs are
    as recorded (a tunable added later may be left out: ``tunable_defaults`` says what
    that means, and :meth:`time_of` applies it).  ``file`` is the artifact it was read
    from."""

    key: Mapping[str, KeyValue]
    distance: tuple[float, ...]
    winner: Mapping[str, KeyValue]
    timings: Timings
    file: str
    lookup: Mapping[_Slot, float] = field(default_factory=dict, repr=False, compare=False)
    defaults: Mapping[str, KeyValue] = field(default_factory=dict, repr=False, compare=False)
    finals: frozenset[_Slot] | None = field(default=None, repr=False, compare=False)
    """The configs whose timing is a final one (the tuner's full protocol, which times the
    winner and the default together); ``None``: every timing counts as final (made by
    hand)."""
    tuned_default: Mapping[str, KeyValue] | None = field(default=None, repr=False, compare=False)
    slots: tuple[_Slot, ...] = field(default=(), repr=False, compare=False)
    """Each of :attr:`timings`' configs as :func:`config_token` makes it with
    :attr:`defaults`, in their order (what :meth:`time_at` takes)."""

    def __post_init__(self) -> None:
        # Made by hand: the registry passes the slots and the lookup it keeps.
        if not self.slots and self.timings:
            object.__setattr__(self, "slots", slots_of(self.timings, self.defaults))
        if not self.lookup and self.timings:
            object.__setattr__(self, "lookup", lookup_of(self.slots, self.timings))

    def time_of(self, config: Mapping[str, KeyValue]) -> float | None:
        """The median µs this key timed ``config`` at (the family's ``tunable_defaults``
        filling what either leaves out), or ``None`` where it did not time it."""
        return self.lookup.get(config_token(config, self.defaults))

    def time_at(self, slot: Hashable) -> float | None:
        """:meth:`time_of` for a config already made a token with :attr:`defaults` (a rule
        that weighs one config at many neighbours makes its token once)."""
        return self.lookup.get(cast(_Slot, slot))

    def final_at(self, slot: Hashable) -> bool:
        """Whether the timing of the config ``slot`` stands for (one of :attr:`slots`) is
        a final one (see :meth:`timed_in`)."""
        return self.finals is None or slot in self.finals

    def timed_in(self, config: Mapping[str, KeyValue]) -> str | None:
        """``final`` or ``screen``: which of the tuner's protocols timed ``config`` here
        (a screen is a few samples, read against a final it is no paired comparison);
        ``None`` where it was not timed."""
        slot = config_token(config, self.defaults)
        if slot not in self.lookup:
            return None
        return "final" if self.finals is None or slot in self.finals else "screen"


def config_token(config: Mapping[str, KeyValue], defaults: Mapping[str, KeyValue]) -> _Slot:
    """``config`` completed with ``defaults`` as a hashable value that tells ``1`` from
    ``True`` and ``1.0`` (JSON types differ)."""
    return tuple(sorted((k, type(v).__name__, v) for k, v in {**defaults, **config}.items()))


def slots_of(timings: Timings, defaults: Mapping[str, KeyValue]) -> tuple[_Slot, ...]:
    """Each of ``timings``' configs as a token (:func:`config_token`), in their order."""
    return tuple(config_token(config, defaults) for config, _ in timings)


def lookup_of(slots: tuple[_Slot, ...], timings: Timings) -> dict[_Slot, float]:
    """Each slot's time; a config timed twice keeps its faster time (``timings`` are
    fastest first)."""
    lookup: dict[_Slot, float] = {}
    for slot, (_, median) in zip(reversed(slots), reversed(timings), strict=True):
        lookup[slot] = median
    return lookup
