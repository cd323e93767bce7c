"""The contract of a kernel family: what the registry reads of a declaration.

A kernel family publishes a :class:`KernelDecl` (its name, family version, key axes with
which ones are ordinal, and a default heuristic) through the entry-point group
``flyconfigs.kernels``, or registers one in-process with
:func:`~flyconfigs.registry.families.loaded.register_kernel`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from flyconfigs.registry.core.axes import NAME_PATTERN, KeyAxis, KeyValue, normalize_key
from flyconfigs.registry.families.nearest import log_distance

if TYPE_CHECKING:
    from flyconfigs.registry.families.offers import Neighbour, Tie
    from flyconfigs.registry.sources.device import DeviceQuery

__all__ = ["DEVICE_MATCHES", "NAME_PATTERN", "REQUIRED", "Default", "DeviceMatch", "KernelDecl", "KeyAxis", "KeyValue", "SpelledKey",
           "SourceBinding", "TunableVariants", "normalize_key"]

DeviceMatch = Literal["arch", "product"]
"""Which devices' artifacts serve a kernel (:attr:`KernelDecl.device_match`)."""
DEVICE_MATCHES: tuple[DeviceMatch, ...] = ("arch", "product")

SourceBinding = Literal["exact", "version"]
"""How an artifact's ``kernel.source_sha256`` binds it: ``exact`` (a different source is
stale, never served) or ``version`` (any source of an accepted family version serves)."""


REQUIRED = ("name", "version", "key_axes")
"""The data members a declaration must give (checked when one is loaded or registered)."""
T = TypeVar("T")


class Default(Generic[T]):
    """A contract member's default value, shadowed by whatever a subclass or an instance gives it
    (a class attribute, a property, a dataclass field or an assignment in ``__init__``):
    a descriptor with ``__get__`` only, so an instance's own value always wins."""

    def __init__(self, value: T) -> None:
        self.value = value

    def __get__(self, obj: object, objtype: type | None = None) -> T:
        return self.value


_NOTHING: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class SpelledKey:
    """A key as its user spelled it, made the family's (:meth:`KernelDecl.spelled_key`):
    ``key`` in the family's own axes (still to be checked), ``filled`` each axis the
    user left out that the device implies or that has a natural default, with the value
    given it, and ``device`` a device the key itself named (a spec such as a catalog
    product's name, as vLLM's ``device_name``), ``None`` if it named none."""

    key: dict[str, object]
    filled: dict[str, KeyValue]
    device: str | None = None


@dataclass(frozen=True)
class TunableVariants:
    """The implementations of a family whose configs differ in shape: the tunable
    ``selector`` names one (a config may leave it out where the family's
    :attr:`~KernelDecl.tunable_defaults` has it), and ``members`` maps each of its values
    to the other tunables that implementation's configs hold.  Every name in ``members``
    is one of the family's :attr:`~KernelDecl.tunables`, which list all of them."""

    selector: str
    members: Mapping[KeyValue, tuple[str, ...]]


class KernelDecl(ABC):
    """The contract of a kernel family: every member the registry reads, in one base
    class that a plugin subclasses so that ``mypy --strict`` checks it.

    Required: :attr:`name`, :attr:`version`, :attr:`key_axes` and :meth:`default_config`.
    Everything else has a default that means "nothing more to say".  A data member may
    be given as a class attribute, a property, a dataclass field or an attribute set in
    ``__init__``.  The tuner's members are in
    :class:`flyconfigs.kernels.plugin.TunableKernel`, a subclass of this one.

    Where each member runs (so what it may import): every member here runs in the
    serving process, in ``explain``, ``doctor`` and ``validate`` and in the tuner's
    parent; none may import torch, Triton or a GPU runtime at module level or when called.
    """

    if TYPE_CHECKING:
        # What a type checker holds a plugin to; at run time the required data members
        # are checked when a declaration is loaded, and the optional ones default below.
        @property
        @abstractmethod
        def name(self) -> str:
            """The kernel's name, as artifacts and entry points spell it."""

        @property
        @abstractmethod
        def version(self) -> int:
            """The family version: a change of meaning of the config or key bumps it."""

        @property
        @abstractmethod
        def key_axes(self) -> tuple[KeyAxis, ...]:
            """The key's axes, in order."""

        @property
        def tunables(self) -> Mapping[str, Sequence[KeyValue]]:
            """Each tunable and the values it takes.  The registry refuses a config that
            names another tunable, leaves one out (unless :attr:`tunable_defaults` has
            it) or gives a value outside its set, before :meth:`check_config` runs.
            Empty (the default): the registry checks nothing of the config's shape."""

        @property
        def tunable_defaults(self) -> Mapping[str, KeyValue]:
            """Tunables added after configs were published, each with the value a config
            that leaves it out means (default none)."""

        @property
        def tunable_variants(self) -> TunableVariants | None:
            """For a family with several implementations, which tunables each one's
            configs hold (see :class:`TunableVariants`); ``None`` (the default): every
            config holds every tunable."""

        @property
        def compatible_versions(self) -> Collection[int]:
            """Older family versions whose artifacts this version still serves (a
            ``range`` or a set); default none: only :attr:`version` itself."""

        @property
        def source_binding(self) -> SourceBinding:
            """``exact`` (the default): an artifact whose ``source_sha256`` differs from
            :meth:`source_sha256` is stale; ``version``: the family bumps :attr:`version`
            whenever a source change changes what a config means, so any source of an
            accepted version serves."""

        @property
        def data_packages(self) -> Collection[str]:
            """Distribution names of the data packages the family's owner publishes:
            they rank as the owner's (see :mod:`flyconfigs.registry.resolve`); default
            none."""

        @property
        def device_match(self) -> DeviceMatch:
            """Which devices' artifacts serve: ``arch`` (the default), the same product,
            then one of the same arch and compute units, then one borrowed from another
            device of the arch; ``product``: only artifacts of the asked device's own
            product, arch and compute units (FlyDSL's identity).  A value that is
            neither, or a property that raises, is reported once and counts as
            ``product``, the narrower rule a family declaring this member most likely
            meant (:attr:`~flyconfigs.registry.families.family.Family.device_match`)."""

        @property
        def own_device_first(self) -> bool:
            """``True``: the asked device's nearest tuned key serves before an exact key
            tuned on a sibling of the same arch and compute units, as a framework that
            keeps one tuned file per device looks its configs up (vLLM).  Default
            ``False``: an exact key on a sibling comes first."""

        @property
        def relaxed_axes(self) -> Collection[str]:
            """Exact (non-ordinal) axes on which the nearest-key step may offer a tuned
            key that differs from the asked one, as a framework's lookup retries
            without them (aiter's fused MoE retries with any activation).  The family's
            own :meth:`key_distance` ranks such keys (``None``: never served); a family
            without one is offered none.  Default none: only tuned keys equal to the
            asked one on every exact axis."""
    else:
        tunables = Default(_NOTHING)
        tunable_defaults = Default(_NOTHING)
        tunable_variants: Default[TunableVariants | None] = Default(None)
        compatible_versions = Default(())
        source_binding = Default("exact")
        data_packages = Default(())
        device_match = Default("arch")
        own_device_first = Default(False)
        relaxed_axes = Default(())

    @abstractmethod
    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The heuristic config for ``key`` on ``device`` (``None`` when unknown)."""

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` validated against the axes (and the family's own rules, where it
        overrides this), in axis order; :class:`InvalidKeyError` naming the axis."""
        return normalize_key(self, key)

    def spelled_key(self, key: Mapping[str, object], device: DeviceQuery | None) -> SpelledKey:
        """``key`` as the family's users spell it (a framework's file-name or column
        names) in the family's own axes, for ``device`` (``None`` when unknown), with the
        axes it fills in; :meth:`check_key` then checks the result.  Raises
        :class:`InvalidKeyError` naming the axis, what it accepts and an example, for a
        spelling it cannot read.  Default: ``key`` as given, nothing filled in."""
        return SpelledKey(dict(key), {})

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
        """The family's own rules: ``None`` when ``config`` (already a member of the
        declared :attr:`tunables`) can run for ``key`` on ``device`` (``None`` when
        unknown), else why not.  Nothing is served without passing it.  Default: no
        rules beyond the tunables."""
        return None

    def adapt_config(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> dict[str, KeyValue] | None:
        """A config tuned for a nearby key made to fit ``key``, or ``None`` (the
        default) when the family does not adapt configs."""
        return None

    def source_sha256(self) -> str | None:
        """sha256 of the kernel's source, which artifacts record; ``None`` (the default)
        when the family does not say, and then no artifact is stale by its source."""
        return None

    def key_distance(self, asked: Mapping[str, KeyValue], tuned: Mapping[str, KeyValue]) -> tuple[float, ...] | None:
        """The family's nearest-key rule: how far the tuned key ``tuned`` is from
        ``asked`` (both equal on every exact axis but the family's :attr:`relaxed_axes`),
        as a tuple compared lexicographically, the smaller served first (keys that share
        its first element are equally near, ordered by :meth:`tie_rank`); ``None``: never serve ``tuned``'s
        winner for ``asked``.  Default: the sum over ordinal axes of ``|log2 a - log2 b|``,
        a tie to the larger tuned value (:func:`~flyconfigs.registry.families.nearest.log_distance`)."""
        return log_distance(self.key_axes, asked, tuned)

    def tie_rank(self, asked: Mapping[str, KeyValue], tie: Tie) -> tuple[float, ...]:
        """How the nearest-key step orders tuned keys of one standing equally near
        ``asked`` (the same first element of :meth:`key_distance`): ``tie`` is one of
        them (:class:`~flyconfigs.registry.families.offers.Tie`: its key, its distance, which file
        and row it comes from, its artifact read on first use), and the keys are served
        in the order of the ranks answered, compared lexicographically, the smaller
        first; equal ranks keep the default order.  The copies of one key (two folders' files, two
        runs in one folder) all take the rank of the copy precedence puts first (the
        one the exact step serves), so the others follow it.  The rank replaces the rest of
        :meth:`key_distance` for these keys (a family that wants it kept puts
        ``tie.distance[1:]`` first).  Asked only where such keys tie.  Default ``()``:
        the rest of :meth:`key_distance`, then the sources' order.
        :func:`~flyconfigs.registry.families.offers.file_order` is the rank of a framework that
        takes the first of its file's equally near entries (vLLM)."""
        return ()

    def pass_over_neighbour(self, asked: Mapping[str, KeyValue], tuned: Mapping[str, KeyValue],
                            config: Mapping[str, Any], device: DeviceQuery) -> str | None:
        """A reason not to serve ``config`` (the winner of the nearer tuned key ``tuned``,
        as it would be served for ``asked``, after :meth:`adapt_config`) for ``asked`` on
        ``device``; the next candidate is tried, and in the end :meth:`default_config`.
        The reason is kept in the resolution's ``reasons``.  Default: ``None``."""
        return None

    def choose_from_neighbours(self, asked: Mapping[str, KeyValue], neighbours: Iterable[Neighbour],
                               device: DeviceQuery) -> tuple[Mapping[str, KeyValue], str] | None:
        """The family's neighbourhood rule: the config to serve for ``asked`` on
        ``device`` where the nearest-key step would serve a nearer key's winner, chosen
        from what the device measured around it, and why (kept in the resolution and
        printed by ``explain``); ``None`` (the default): serve that winner.

        ``neighbours`` are the tuned keys of that one step and one standing (those the
        step would serve from), measured on the device the nearest one was, each with its
        distance and every candidate it timed (:class:`~flyconfigs.registry.families.offers.Neighbour`),
        nearest first; each is read from its file when the iteration reaches it, so stop
        as soon as the rest are too far.  What is returned is served only if the
        registry's checks accept it for ``asked``, as any served config is."""
        return None
