"""A kernel family as the registry calls it: its declaration checked, made once per loaded
kernel and resolver.

A :class:`Family` holds a loaded kernel's record (declaration, origin, distribution) and
the problem log of the resolver that loaded it.  It reads each optional data member once,
checked, and calls every member the search needs through
:func:`~flyconfigs.registry.core.guard.guarded`: a member that raises, or answers something of
the wrong type, is reported once per declaration and member into that resolver's own fault
set (``kernel-error``, naming the origin its record knows) and the search goes on as the
member's documentation says; only where nothing is left to serve (the default, the key
axes) does a fault raise, as one :class:`~flyconfigs.errors.KernelPluginError`.

A bare declaration, as plugins and tools call it outside a resolver, has a family too
(:meth:`Family.of_declaration`; :mod:`flyconfigs.registry.plugin`'s functions): it reports
to the process-wide kernel table's log, naming the origin that table knows.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterable, Mapping
from functools import cached_property
from typing import Any

from flyconfigs.errors import InvalidKeyError, KernelPluginError
from flyconfigs.registry.core.guard import Raised, guarded
from flyconfigs.registry.core.names import canonical_name
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.families.contract import DEVICE_MATCHES, DeviceMatch, KernelDecl, KeyValue, SpelledKey, normalize_key
from flyconfigs.registry.families.loaded import RECORDS, LoadedKernel, kernel_name, origin_of
from flyconfigs.registry.families.tunables import check_tunables
from flyconfigs.registry.sources.device import DeviceQuery

__all__ = ["Family"]

logger = logging.getLogger("flyconfigs.registry")


def _numbers(value: object) -> bool:
    """Whether ``value`` is a tuple of numbers (no bool, no NaN)."""
    return isinstance(value, tuple) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) for v in value)


class Family:
    """A loaded kernel's declaration, checked once and called safely (see the module);
    ``problems`` is the log (and fault set) of the resolver it belongs to."""

    def __init__(self, decl: KernelDecl, problems: ProblemLog, record: LoadedKernel | None = None) -> None:
        self.decl = decl
        self.problems = problems
        self.record = record

    @classmethod
    def of(cls, record: LoadedKernel, problems: ProblemLog) -> Family:
        """The family of a loaded kernel, reporting to ``problems``."""
        return cls(record.decl, problems, record)

    @classmethod
    def of_declaration(cls, decl: KernelDecl, problems: ProblemLog | None = None) -> Family:
        """The family of a bare declaration, reporting to ``problems`` (default: the
        process-wide table's log), its origin as that log's resolver (or the process-wide
        table) knows it."""
        return cls(decl, problems if problems is not None else RECORDS.problems)

    @cached_property
    def _origin(self) -> tuple[str, str | None]:
        if self.record is not None:
            return self.record.where, self.record.distribution
        return origin_of(self.decl, self.problems)

    @property
    def where(self) -> str:
        """Where the declaration came from, for messages."""
        return self._origin[0]

    @property
    def distribution(self) -> str | None:
        """The distribution whose entry point declares the family, ``None`` for one made in this process."""
        return self._origin[1]

    @property
    def kernel(self) -> LoadedKernel | KernelDecl:
        """The loaded record when there is one (its source digest asked once), else the declaration."""
        return self.record if self.record is not None else self.decl

    @property
    def name(self) -> str:
        """The kernel's name (:class:`KernelPluginError` if reading it fails)."""
        return self.record.name if self.record is not None else kernel_name(self.decl)

    def fault(self, member: str, what: BaseException | str, consequence: str, slot: str | None = None) -> None:
        """Report ``member`` failing (``what``: what it raised, or what is wrong with its answer)
        once per declaration and ``slot`` (default: the member) in this family's log."""
        if not self.problems.first_fault(self.decl, slot or member):
            return
        said = str(Raised(what)) if isinstance(what, BaseException) else what
        self.problems.report(Problem("kernel-error", self.where, f"{member} {said}; {consequence}", self.distribution))


    @cached_property
    def device_match(self) -> DeviceMatch:
        """``device_match`` checked: one that raises or is neither ``arch`` nor
        ``product`` is reported and counts as ``product`` (only the asked product's
        artifacts serve: a family that declares the member means to narrow them)."""
        match = guarded(getattr, self.decl, "device_match")
        if isinstance(match, Raised) or not isinstance(match, str) or match not in DEVICE_MATCHES:
            self.fault("device_match", match.exc if isinstance(match, Raised) else f"raised TypeError: it is {match!r}, "
                       f"not one of {', '.join(map(repr, DEVICE_MATCHES))}", "only artifacts of the asked product serve it")
            return "product"
        return match

    @cached_property
    def own_device_first(self) -> bool:
        """``own_device_first`` checked: one that raises or is not a bool counts as ``False``."""
        value = guarded(getattr, self.decl, "own_device_first")
        if isinstance(value, Raised) or type(value) is not bool:
            self.fault("own_device_first", value.exc if isinstance(value, Raised) else
                       f"raised TypeError: it is a {type(value).__name__}, not a bool",
                       "an exact key on a sibling device serves first")
            return False
        return value

    @cached_property
    def own_distance(self) -> bool:
        """Whether the family gives its own ``key_distance`` (else the search precomputes the default)."""
        return "key_distance" in vars(self.decl) or type(self.decl).key_distance is not KernelDecl.key_distance

    @cached_property
    def own_tie_rank(self) -> bool:
        """Whether the family gives its own ``tie_rank`` (else no tie is ever built)."""
        return "tie_rank" in vars(self.decl) or type(self.decl).tie_rank is not KernelDecl.tie_rank

    @cached_property
    def relaxed_axes(self) -> frozenset[str]:
        """``relaxed_axes`` checked (names of non-ordinal axes; none when it fails or the
        family gives no ``key_distance`` of its own)."""
        if not self.own_distance:
            return frozenset()

        def read() -> frozenset[str]:
            names = self.decl.relaxed_axes
            axes = {a.name for a in self.decl.key_axes if not a.ordinal}
            if isinstance(names, str) or not isinstance(names, Collection) or not all(
                    isinstance(n, str) and n in axes for n in names):
                raise TypeError(f"it is {names!r}, not names of the kernel's non-ordinal axes")
            return frozenset(names)

        found = guarded(read)
        if isinstance(found, Raised):
            self.fault("relaxed_axes", found.exc, "only keys equal on every exact axis are served")
            return frozenset()
        return found

    @cached_property
    def data_packages(self) -> frozenset[str]:
        """``data_packages`` checked, each name normalized (none when it fails)."""

        def read() -> frozenset[str]:
            named = self.decl.data_packages
            if isinstance(named, str) or not all(isinstance(p, str) for p in named):
                raise TypeError(f"it is {named!r}, not a collection of distribution names")
            return frozenset(canonical_name(p) for p in named)

        found = guarded(read)
        if isinstance(found, Raised):
            self.fault("data_packages", found.exc, "the family's owner names no data package")
            return frozenset()
        return found

    def spelled_key(self, key: object, device: DeviceQuery | None) -> SpelledKey:
        """``key`` as the family's ``spelled_key`` reads its users' spelling
        (:class:`InvalidKeyError` for one it refuses); one that raises anything else is
        reported and ``key`` is taken as given."""
        if not isinstance(key, Mapping):
            raise InvalidKeyError(f"key for {self.name!r} must be a mapping of axis names to values, "
                                  f"got {type(key).__name__}")
        spelled = guarded(self.decl.spelled_key, key, device)
        if isinstance(spelled, Raised) and isinstance(spelled.exc, InvalidKeyError):
            raise spelled.exc
        if isinstance(spelled, SpelledKey):
            return spelled
        self.fault("spelled_key", spelled.exc if isinstance(spelled, Raised) else
                   f"raised TypeError: answered {type(spelled).__name__}, not a SpelledKey", "the key is taken as given")
        return SpelledKey(dict(key), {})

    def check_key(self, key: object) -> dict[str, KeyValue]:
        """``key`` checked by the family's ``check_key`` (:class:`InvalidKeyError` for what
        it refuses); one that raises anything else is reported and the declared axes alone
        check the key (:class:`KernelPluginError` when they cannot be read either)."""
        if not isinstance(key, Mapping):
            raise InvalidKeyError(f"key for {self.name!r} must be a mapping of axis names to values, "
                                  f"got {type(key).__name__}")
        checked = guarded(self.decl.check_key, key)
        if not isinstance(checked, Raised):
            return checked
        if isinstance(checked.exc, InvalidKeyError):
            raise checked.exc
        self.fault("check_key", checked.exc, "keys are checked against the declared axes only")
        plain = guarded(normalize_key, self.decl, key)
        if not isinstance(plain, Raised):
            return plain
        if isinstance(plain.exc, InvalidKeyError):
            raise plain.exc
        raise KernelPluginError(self.name, self.where, "key_axes", str(plain))

    def check_tunables(self, config: Mapping[str, object]) -> str | None:
        """:func:`check_tunables`, a check that raises on odd data counting as a refusal."""
        why = guarded(check_tunables, self.decl, config)
        return f"the kernel's check raised {type(why.exc).__name__}: {why.exc}" if isinstance(why, Raised) else why

    def own_check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                         device: DeviceQuery | None) -> str | None:
        """The family's own ``check_config`` alone (for a config whose tunables were
        checked); one that raises counts as a refusal, with what it raised."""
        why = guarded(self.decl.check_config, config, key, device)
        return f"the kernel's check raised {type(why.exc).__name__}: {why.exc}" if isinstance(why, Raised) else why

    def check_config(self, config: object, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> str | None:
        """Why ``config`` cannot be served for ``key`` on ``device``, or ``None``: first
        the declared tunables, then the family's own ``check_config``."""
        if not isinstance(config, Mapping):
            return f"a config must be a mapping, got {type(config).__name__}"
        why = self.check_tunables(config)
        return why if why is not None else self.own_check_config(config, key, device)

    def default(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The family's default heuristic for ``key`` on ``device``, as a plain dict.  It
        is the last step of every resolution: one that raises or answers anything but a
        mapping is reported and raised as :class:`KernelPluginError`."""
        config = guarded(self.decl.default_config, key, device)
        if isinstance(config, Mapping):
            return dict(config)
        what: BaseException | str = (config.exc if isinstance(config, Raised)
                                     else f"raised TypeError: it returned a {type(config).__name__}, not a mapping")
        self.fault("default_config", what, "calls that no artifact serves fail")
        said = str(Raised(what)) if isinstance(what, BaseException) else what
        raise KernelPluginError(self.name, self.where, "default_config",
                                f"{said}; no artifact serves this call, so there is no config")

    def adapt(self, config: Mapping[str, KeyValue], key: dict[str, KeyValue],
              device: DeviceQuery) -> dict[str, KeyValue] | None:
        """The family's ``adapt_config``: ``config`` changed to fit ``key``, or ``None``
        (also when it raises or answers anything but a mapping)."""
        adapted = guarded(self.decl.adapt_config, config, key, device)
        if isinstance(adapted, Raised):
            logger.debug("%s: adapt_config raised for %s", self.decl.name, dict(key), exc_info=adapted.exc)
            return None
        return dict(adapted) if isinstance(adapted, Mapping) else None

    def distance(self, asked: Mapping[str, KeyValue], tuned: Mapping[str, KeyValue]) -> tuple[float, ...] | None:
        """The family's ``key_distance`` checked: a tuple of numbers, or ``None`` (never
        served; also when it fails: reported)."""
        distance = guarded(self.decl.key_distance, asked, tuned)
        if distance is None or (not isinstance(distance, Raised) and _numbers(distance)):
            return distance
        self.fault("key_distance", distance.exc if isinstance(distance, Raised) else
                   f"raised TypeError: it returned {distance!r}, not a tuple of numbers or None",
                   "no nearer key is served where it fails")
        return None

    def tie_rank(self, asked: Mapping[str, KeyValue], tie: object) -> tuple[float, ...] | None:
        """The family's ``tie_rank`` of ``tie`` checked: a tuple of numbers, or ``None``
        when it fails (reported: equally near keys then keep the default order)."""
        rank = guarded(self.decl.tie_rank, asked, tie)
        if not isinstance(rank, Raised) and _numbers(rank):
            return rank
        self.fault("tie_rank", rank.exc if isinstance(rank, Raised) else
                   f"raised TypeError: it returned {rank!r}, not a tuple of numbers",
                   "equally near keys keep key_distance's order")
        return None

    def pass_over(self, asked: Mapping[str, KeyValue], tuned: Mapping[str, KeyValue], config: Mapping[str, Any],
                  device: DeviceQuery) -> str | None:
        """The family's ``pass_over_neighbour`` checked: its reason to pass over a nearer
        key's winner, or ``None`` (also when it fails: reported)."""
        why = guarded(self.decl.pass_over_neighbour, asked, tuned, config, device)
        if why is None or isinstance(why, str):
            return why
        self.fault("pass_over_neighbour", why.exc if isinstance(why, Raised) else
                   f"raised TypeError: it returned a {type(why).__name__}, not a str or None",
                   "nearer keys' winners are served as if it said nothing")
        return None

    def choose(self, asked: Mapping[str, KeyValue], neighbours: Iterable[object],
               device: DeviceQuery) -> tuple[dict[str, KeyValue], str] | None:
        """The family's ``choose_from_neighbours`` checked: the config it chooses and why,
        or ``None`` (serve the nearest winner; also when it fails: reported)."""
        answer = guarded(self.decl.choose_from_neighbours, asked, neighbours, device)
        if answer is None:
            return None
        if not isinstance(answer, Raised) and (isinstance(answer, tuple) and len(answer) == 2
                                                and isinstance(answer[0], Mapping) and isinstance(answer[1], str)):
            return dict(answer[0]), answer[1]
        text = repr(answer)
        said = answer if isinstance(answer, Raised) else Raised(TypeError(
            f"it returned {text if len(text) <= 120 else text[:117] + '...'}, not a (config, reason) pair or None"))
        self.fault("choose_from_neighbours", said.exc, "the nearest key's winner is served instead")
        return None
