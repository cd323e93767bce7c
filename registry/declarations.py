"""What the registry needs to know about a kernel: its key axes and its default.

A kernel family publishes a :class:`KernelDecl` (its name, family version, key axes with
which ones are ordinal, and a default heuristic) through the entry-point group
``flyconfigs.kernels``, or registers one in-process with :func:`register_kernel`.  The
registry never imports a kernel library except through that group.
"""

from __future__ import annotations

import json
import math
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from flyconfigs.errors import (
    AmbiguousKernelError,
    FlyconfigsError,
    InvalidKeyError,
    KernelPluginError,
    UnknownKernelError,
)
from flyconfigs.registry.entrypoints import FoundEntryPoint, find_entry_points
from flyconfigs.registry.problems import Problem, ProblemLog

if TYPE_CHECKING:
    from flyconfigs.registry.device import DeviceQuery

__all__ = [
    "KERNEL_GROUP",
    "KERNEL_OWNERS_ENV",
    "KernelDecl",
    "KeyAxis",
    "KeyValue",
    "SourceBinding",
    "TunableVariants",
    "check_config",
    "check_tunables",
    "DeclaredKernel",
    "Default",
    "DeviceMatch",
    "declared_by",
    "declared_kernels",
    "check_key",
    "default_config",
    "kernel_declaration",
    "kernel_name",
    "normalize_key",
    "parse_key_items",
    "parse_value",
    "register_kernel",
    "unregister_kernel",
]

KERNEL_GROUP = "flyconfigs.kernels"
KERNEL_OWNERS_ENV = "FLYCONFIGS_KERNELS"
"""``NAME=DISTRIBUTION[,…]``: which distribution's declaration a kernel name means when
several distributions declare it."""
OWN_DISTRIBUTION = "flyconfigs"
KeyValue = Any
"""A key or config value: a JSON value as schema 1.1 allows (``flyconfigs.schema.Value``);
each kernel's declaration says which its axes and tunables take."""
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+:-]{0,63}$")
_INT = re.compile(r"^-?[0-9]{1,18}$")
_NUMERIC = re.compile(r"^[-+0-9.]")
_FLOAT = re.compile(r"^-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,20}([eE][-+]?[0-9]{1,3})?|[eE][-+]?[0-9]{1,3})$")
_JSON_KINDS: dict[type, str] = {int: "an int", str: "a name", bool: "a bool", float: "a finite float", list: "a list"}


@dataclass(frozen=True)
class KeyAxis:
    """One axis of a kernel's key.

    ``kind`` is the JSON type its values take: ``int``, ``str`` (a name), ``bool``,
    ``float`` or ``list`` (a list of scalars, such as a tensor shape); ``nullable``
    admits ``None`` as well.  ``ordinal`` int axes (sizes such as ``M``) may be served
    by the nearest tuned value; other axes never are.  ``choices`` restricts a string
    axis; ``minimum`` and ``maximum`` bound an int axis.
    """

    name: str
    kind: type = int
    ordinal: bool = False
    choices: tuple[str, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None
    nullable: bool = False

    def check(self, kernel: str, value: object) -> None:
        """Raise :class:`InvalidKeyError` naming this axis unless ``value`` fits it."""
        where = f"key axis {self.name!r} of {kernel!r}"
        if value is None and self.nullable:
            return
        if type(value) is not self.kind or (isinstance(value, float) and not math.isfinite(value)):
            raise InvalidKeyError(f"{where} must be {_JSON_KINDS.get(self.kind, self.kind.__name__)}, got {value!r}")
        if isinstance(value, int) and not isinstance(value, bool):
            if self.minimum is not None and value < self.minimum:
                raise InvalidKeyError(f"{where} must be >= {self.minimum}, got {value}")
            if self.maximum is not None and value > self.maximum:
                raise InvalidKeyError(f"{where} must be <= {self.maximum}, got {value}")
        elif isinstance(value, str):
            if not NAME_PATTERN.match(value):
                raise InvalidKeyError(f"{where} must be a name, got {value!r}")
            if self.choices is not None and value not in self.choices:
                raise InvalidKeyError(f"{where} must be one of {', '.join(self.choices)}, got {value!r}")
        elif isinstance(value, list):
            if not all(v is None or type(v) in (bool, int, float, str) for v in value):
                raise InvalidKeyError(f"{where} must be a list of scalars, got {value!r}")


DeviceMatch = Literal["arch", "product"]
"""Which devices' artifacts serve a kernel (:attr:`KernelDecl.device_match`)."""

SourceBinding = Literal["exact", "version"]
"""How an artifact's ``kernel.source_sha256`` binds it: ``exact`` (a different source is
stale, never served) or ``version`` (any source of an accepted family version serves)."""


T = TypeVar("T")
_REQUIRED = ("name", "version", "key_axes")
"""The data members a declaration must give (checked when one is loaded)."""


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
            product, arch and compute units (FlyDSL's identity)."""
    else:
        tunables = Default(_NOTHING)
        tunable_defaults = Default(_NOTHING)
        tunable_variants: Default[TunableVariants | None] = Default(None)
        compatible_versions = Default(())
        source_binding = Default("exact")
        data_packages = Default(())
        device_match = Default("arch")

    @abstractmethod
    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The heuristic config for ``key`` on ``device`` (``None`` when unknown)."""

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` validated against the axes (and the family's own rules, where it
        overrides this), in axis order; :class:`InvalidKeyError` naming the axis."""
        return normalize_key(self, key)

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


_REGISTERED: dict[str, KernelDecl] = {}
_LOADED: dict[str, KernelDecl] = {}
_ORIGINS: dict[str, tuple[str, str]] = {}
"""Kernel name -> (the entry point and distribution it was loaded from, the distribution)."""
_FAULTS: set[tuple[int, str]] = set()
"""(declaration, member) pairs whose raising was already reported."""
PROBLEMS = ProblemLog()
"""Problems met while finding kernel declarations (``flyconfigs doctor`` lists them)."""


def register_kernel(decl: KernelDecl) -> KernelDecl:
    """Declare ``decl`` in this process; it shadows an entry point of the same name."""
    _REGISTERED[decl.name] = decl
    return decl


def unregister_kernel(name: str) -> None:
    """Forget an in-process declaration (tests use this)."""
    _REGISTERED.pop(name, None)


def forget_loaded() -> None:
    """Forget declarations loaded from entry points and the problems met finding them
    (after an install or uninstall; :meth:`Resolver.refresh` calls this)."""
    global PROBLEMS
    _LOADED.clear()
    _ORIGINS.clear()
    _FAULTS.clear()
    PROBLEMS = ProblemLog()


def _owners() -> dict[str, str]:
    owners = {}
    for item in os.environ.get(KERNEL_OWNERS_ENV, "").split(","):
        name, sep, dist = item.partition("=")
        if sep and name.strip() and dist.strip():
            owners[name.strip()] = dist.strip()
    return owners


def _choose(kernel: str, found: list[FoundEntryPoint], problems: ProblemLog) -> FoundEntryPoint:
    """The one declaration ``kernel`` means: the distribution ``FLYCONFIGS_KERNELS``
    names, else the only one, else flyconfigs' own; the shadowed ones are reported and
    never loaded.  Several third-party declarations and no choice is an error."""
    from packaging.utils import canonicalize_name

    owner = _owners().get(kernel)
    if owner is not None:
        chosen = [f for f in found if canonicalize_name(f.distribution) == canonicalize_name(owner)]
        if not chosen:
            raise UnknownKernelError(
                f"{KERNEL_OWNERS_ENV} says kernel {kernel!r} comes from {owner!r}, which declares no such kernel"
            )
        winner = chosen[0]
    elif len(found) == 1:
        return found[0]
    else:
        own = [f for f in found if canonicalize_name(f.distribution) == OWN_DISTRIBUTION]
        if not own:
            names = ", ".join(sorted(f"{f.distribution} {f.version}" for f in found))
            raise AmbiguousKernelError(
                f"kernel {kernel!r} is declared by several distributions ({names}); choose one with "
                f"{KERNEL_OWNERS_ENV}={kernel}=DISTRIBUTION"
            )
        winner = own[0]
    for other in found:
        if other is not winner:
            problems.report(Problem(
                "kernel-collision", f"{other.distribution} {other.version}",
                f"also declares kernel {kernel!r} ({other.entry_point.value}); not loaded: {winner.distribution} "
                f"owns it (set {KERNEL_OWNERS_ENV}={kernel}=DISTRIBUTION to choose)", other.distribution,
            ))
    return winner


def kernel_declaration(kernel: object, problems: ProblemLog | None = None) -> KernelDecl:
    """The declaration of ``kernel`` (a name, or a declaration returned as is).

    Raises :class:`UnknownKernelError` naming the kernels that are declared, or saying
    why a declared one cannot be loaded; :class:`AmbiguousKernelError` when several
    distributions declare the name and none was chosen; :class:`KernelPluginError`
    naming the distribution when the declaration's ``name`` (or another required
    member) raises.
    """
    if not isinstance(kernel, str):
        if isinstance(kernel, KernelDecl):
            kernel_name(kernel)  # a declaration whose name cannot be read serves nothing
            return kernel
        raise UnknownKernelError(f"kernel must be a name or a KernelDecl, got {type(kernel).__name__}")
    found_decl = _REGISTERED.get(kernel) or _LOADED.get(kernel)
    if found_decl is not None:
        return found_decl
    log = problems if problems is not None else PROBLEMS
    found = find_entry_points(KERNEL_GROUP, log)
    matching = [f for f in found if f.entry_point.name == kernel]
    if not matching:
        known = sorted({*_REGISTERED, *(f.entry_point.name for f in found)})
        raise UnknownKernelError(f"unknown kernel {kernel!r}; declared kernels: {', '.join(known) or 'none'}")
    chosen = _choose(kernel, matching, log)
    where = f"entry point {chosen.entry_point.value!r} of {chosen.distribution} {chosen.version}"
    try:
        decl = chosen.entry_point.load()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever a plugin raises on import is one clear error
        raise UnknownKernelError(f"kernel {kernel!r}: {where} cannot be loaded ({type(exc).__name__}: {exc})") from None
    try:
        if not isinstance(decl, KernelDecl):
            raise UnknownKernelError(f"kernel {kernel!r}: {where} is not a KernelDecl: a plugin's object must be an "
                                     f"instance of a subclass of flyconfigs.registry.KernelDecl (got "
                                     f"{type(decl).__name__})")
        missing = [member for member in _REQUIRED if _lacks(decl, member, kernel, where)]
        if missing:
            raise UnknownKernelError(f"kernel {kernel!r}: {where} gives no {', '.join(missing)}")
        try:
            name = decl.name
        except Exception as exc:  # noqa: BLE001 - a plugin's property failing is its error, named
            raise KernelPluginError(kernel, where, "name", _raised(exc)) from None
    except KernelPluginError as exc:
        log.report(Problem("kernel-error", where, f"{exc.member} {exc.what}; kernel {kernel!r} cannot be served",
                           chosen.distribution))
        raise
    if name != kernel:
        raise UnknownKernelError(f"kernel {kernel!r}: {where} declares a kernel named {name!r}")
    _LOADED[kernel] = decl
    _ORIGINS[kernel] = (where, chosen.distribution)
    return decl


@dataclass(frozen=True)
class DeclaredKernel:
    """A kernel family this environment declares, as ``flyconfigs list`` shows it:
    its family version and the distribution (and its version) that owns it, ``None``
    for one registered in this process; ``problem`` says why it cannot be loaded."""

    name: str
    version: int | None
    distribution: str | None
    distribution_version: str | None
    problem: str | None = None


def declared_kernels(problems: ProblemLog | None = None) -> list[DeclaredKernel]:
    """Every kernel declared through the ``flyconfigs.kernels`` entry points or in this
    process, by name, each loaded (as :func:`kernel_declaration` loads it) to read its
    version; one that cannot be loaded is listed with the reason."""
    log = problems if problems is not None else PROBLEMS
    found = find_entry_points(KERNEL_GROUP, log)
    versions = {f.distribution: f.version for f in found}
    rows = []
    for name in sorted({*_REGISTERED, *(f.entry_point.name for f in found)}):
        try:
            decl = kernel_declaration(name, log)
        except FlyconfigsError as exc:
            dists = sorted({f.distribution for f in found if f.entry_point.name == name})
            rows.append(DeclaredKernel(name, None, ", ".join(dists) or None, None, str(exc)))
            continue
        dist = declared_by(decl)
        try:
            version = decl.version
        except Exception as exc:  # noqa: BLE001 - a plugin's property failing is its error, named
            rows.append(DeclaredKernel(name, None, dist, versions.get(dist) if dist else None, f"version {_raised(exc)}"))
            continue
        rows.append(DeclaredKernel(name, version, dist, versions.get(dist) if dist else None))
    return rows


def declared_by(decl: KernelDecl) -> str | None:
    """The distribution whose ``flyconfigs.kernels`` entry point gave ``decl`` (the
    family's owner), or ``None`` for a declaration registered or made in this process."""
    return _origin_of(decl)[1]


def _raised(exc: BaseException) -> str:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"raised {type(exc).__name__}" + (f": {first}" if first else "")


def _lacks(decl: object, member: str, kernel: str, where: str) -> bool:
    """Whether ``decl`` has no ``member``; :class:`KernelPluginError` when reading it raises."""
    try:
        getattr(decl, member)
    except AttributeError:
        return True
    except Exception as exc:  # noqa: BLE001 - a plugin's property failing is its error, named
        raise KernelPluginError(kernel, where, member, _raised(exc)) from None
    return False


def _origin_of(decl: object) -> tuple[str, str | None]:
    """Where ``decl`` came from, for messages, and its distribution when known."""
    for name, loaded in _LOADED.items():
        if loaded is decl and name in _ORIGINS:
            return _ORIGINS[name]
    if any(registered is decl for registered in _REGISTERED.values()):
        return f"a {type(decl).__name__} registered in this process", None
    return f"a {type(decl).__name__} passed by the caller", None


def kernel_name(decl: KernelDecl) -> str:
    """``decl.name``; :class:`KernelPluginError` naming where the declaration came from
    when reading it raises or gives anything but a string."""
    try:
        name = decl.name
    except Exception as exc:  # noqa: BLE001 - a plugin's property failing is its error, named
        raise KernelPluginError(f"<{type(decl).__name__}>", _origin_of(decl)[0], "name", _raised(exc)) from None
    if not isinstance(name, str):
        raise KernelPluginError(f"<{type(decl).__name__}>", _origin_of(decl)[0], "name",
                                f"is a {type(name).__name__}, not a str")
    return name


def _report_fault(decl: KernelDecl, member: str, exc: BaseException, consequence: str,
                  problems: ProblemLog | None) -> None:
    """Log a member of ``decl`` raising once per declaration and member, however many
    calls meet it and whatever it says each time (a serving loop must not flood logs)."""
    if (id(decl), member) in _FAULTS:
        return
    _FAULTS.add((id(decl), member))
    where, distribution = _origin_of(decl)
    log = problems if problems is not None else PROBLEMS
    log.report(Problem("kernel-error", where, f"{member} {_raised(exc)}; {consequence}", distribution))


def normalize_key(decl: KernelDecl, key: object) -> dict[str, KeyValue]:
    """``key`` checked against ``decl``'s axes, in the declared axis order.

    Raises :class:`InvalidKeyError` naming the axis and the bad value.
    """
    if not isinstance(key, Mapping):
        raise InvalidKeyError(f"key for {decl.name!r} must be a mapping of axis names to values, got {type(key).__name__}")
    names = [a.name for a in decl.key_axes]
    missing = [n for n in names if n not in key]
    extra = [k for k in key if k not in names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unknown {', '.join(map(repr, extra))}")
        raise InvalidKeyError(f"key for {decl.name!r}: {'; '.join(parts)} (axes: {', '.join(names)})")
    out: dict[str, KeyValue] = {}
    for axis in decl.key_axes:
        axis.check(decl.name, key[axis.name])
        out[axis.name] = key[axis.name]
    return out


def check_key(decl: KernelDecl, key: object, problems: ProblemLog | None = None) -> dict[str, KeyValue]:
    """``key`` checked by the kernel's own :meth:`KernelDecl.check_key` (its axes and its
    family rules); :class:`InvalidKeyError` for anything it refuses.

    A check that raises anything else is the plugin's fault, not the caller's: it is
    reported once (``kernel-error``, naming the distribution) and the key is checked
    against the declared axes alone (:func:`normalize_key`), so serving goes on; every
    config served is still checked by the kernel's ``check_config``.  Raises
    :class:`KernelPluginError` when the axes cannot be read either."""
    if not isinstance(key, Mapping):
        raise InvalidKeyError(f"key for {kernel_name(decl)!r} must be a mapping of axis names to values, "
                              f"got {type(key).__name__}")
    try:
        return decl.check_key(key)
    except InvalidKeyError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's bug must not fail a serving call
        _report_fault(decl, "check_key", exc, "keys are checked against the declared axes only", problems)
    try:
        return normalize_key(decl, key)
    except InvalidKeyError:
        raise
    except Exception as exc:  # noqa: BLE001 - the declared axes themselves cannot be read
        raise KernelPluginError(kernel_name(decl), _origin_of(decl)[0], "key_axes", _raised(exc)) from None


def default_config(decl: KernelDecl, key: Mapping[str, KeyValue], device: DeviceQuery | None,
                   problems: ProblemLog | None = None) -> dict[str, KeyValue]:
    """The kernel's default heuristic for ``key`` on ``device``, as a plain dict.

    It is the last step of every resolution, so there is nothing left to fall back on:
    a heuristic that raises or returns anything but a mapping is reported once
    (``kernel-error``) and raised as :class:`KernelPluginError` naming the kernel, its
    distribution and the member.  A serving engine catches it (or
    :class:`~flyconfigs.errors.FlyconfigsError`) and runs its own default; an empty or
    made-up config would only fail later, at launch, with an unrelated error."""
    try:
        config = decl.default_config(key, device)
        if not isinstance(config, Mapping):
            raise TypeError(f"it returned a {type(config).__name__}, not a mapping")
        return dict(config)
    except Exception as exc:  # noqa: BLE001 - whatever the plugin raises becomes one typed error
        _report_fault(decl, "default_config", exc, "calls that no artifact serves fail", problems)
        raise KernelPluginError(kernel_name(decl), _origin_of(decl)[0], "default_config",
                                f"{_raised(exc)}; no artifact serves this call, so there is no config") from None


def check_tunables(decl: KernelDecl, config: Mapping[str, object]) -> str | None:
    """Why ``config`` is not a config of ``decl``'s declared :attr:`~KernelDecl.tunables`
    (a tunable missing that has no default, one not declared — for a family with
    :attr:`~KernelDecl.tunable_variants`, one its implementation does not hold — a value outside its set,
    where a value matches only one of the same JSON type: ``1`` is not ``True``), or
    ``None``; always ``None`` when the family declares no tunables."""
    tunables = decl.tunables
    if not tunables:
        return None
    defaults = decl.tunable_defaults
    names: Collection[str] = tunables
    variants = decl.tunable_variants
    if variants is not None:
        # One implementation's tunables: the selector's value (or its default) says which.
        chosen = config.get(variants.selector, defaults.get(variants.selector))
        member = next((held for value, held in variants.members.items()
                       if type(value) is type(chosen) and value == chosen), None)
        if member is None:
            return (f"{variants.selector}={chosen!r} is not one of "
                    f"{', '.join(map(str, variants.members))}")
        names = (variants.selector, *member)
    missing = [name for name in names if name not in config and name not in defaults]
    extra = sorted(str(name) for name in config if name not in names)
    if missing or extra:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else [])
        return f"not a {decl.name} config: {'; '.join(parts)}"
    for name, allowed in tunables.items():
        if name not in config:
            continue
        value = config[name]
        if not any(type(value) is type(choice) and value == choice for choice in allowed):
            return f"{name}={value!r} is not one of {', '.join(map(str, allowed))}"
    return None


def check_config(decl: KernelDecl, config: object, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> str | None:
    """Why ``config`` cannot be served for ``key`` on ``device``, or ``None`` when the
    kernel accepts it: first its declared tunables (:func:`check_tunables`), then the
    family's own :meth:`KernelDecl.check_config`.  A check that raises counts as a
    refusal (with what it raised)."""
    if not isinstance(config, Mapping):
        return f"a config must be a mapping, got {type(config).__name__}"
    try:
        why = check_tunables(decl, config)
        return why if why is not None else decl.check_config(config, key, device)
    except Exception as exc:  # noqa: BLE001 - a kernel's check failing on odd data is a refusal
        return f"the kernel's check raised {type(exc).__name__}: {exc}"


def parse_value(text: str) -> KeyValue:
    """A key or grid value from the command line.  ASCII digits (with an optional leading
    ``-``, at most 18 of them) are an int; a JSON number with a fraction or exponent a
    float; ``true``, ``false`` and ``null`` those values; text in ``[…]``, ``{…}`` or
    ``"…"`` is parsed as JSON (a list such as a tensor shape, an object, a string that
    would otherwise read as something else); any other name is a string.  A value that
    looks numeric but is none of these is refused (``--5``, ``1_000``, ``²``)."""
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        value = float(text)
        if not math.isfinite(value):
            raise InvalidKeyError(f"value {text!r} is not a finite number")
        return value
    if text in ("true", "false", "null"):
        return json.loads(text)
    if text[:1] in ('[', '{', '"'):
        try:
            return json.loads(text, parse_constant=_no_constant)
        except ValueError as exc:
            raise InvalidKeyError(f"value {text!r} is not valid JSON: {exc}") from None
    if not text.isascii() or _NUMERIC.match(text) or any(c.isdigit() and not c.isascii() for c in text):
        raise InvalidKeyError(
            f"value {text!r} is neither an int of at most 18 ASCII digits, a finite float, true, false, null, "
            'JSON in [], {} or "", nor a name'
        )
    return text


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a finite number")


def parse_key_items(items: list[str] | tuple[str, ...]) -> dict[str, KeyValue]:
    """``["M=4096", "dtype=bf16"]`` → a key; :class:`InvalidKeyError` for an item that is
    not ``NAME=VALUE``, a bad value, or an axis given twice."""
    key: dict[str, KeyValue] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise InvalidKeyError(f"key item {item!r} is not NAME=VALUE")
        if name in key:
            raise InvalidKeyError(f"key axis {name!r} is given twice")
        key[name] = parse_value(value)
    return key
