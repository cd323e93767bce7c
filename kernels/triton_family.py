"""A row-wise Triton kernel declared, tuned and served in a few lines.

The author gives what only they know — the key axes (``M`` rows of ``N`` columns and the
``dtype`` by default), the configs (a list, or each tunable's values for their product),
the default, the launch and the float64 reference — and :class:`TritonFamily` is the
rest of the plugin protocol (a :class:`~flyconfigs.registry.KernelDecl` and a
:class:`~flyconfigs.kernels.plugin.TunableKernel`): membership of each config in the
declared set before the family's own rules, the space (cheapest to compile first), the
bytes a call moves, the source digest, ``build()`` (``None``: Triton compiles on first
launch), Triton's version for the provenance, and a workload
(:mod:`flyconfigs.kernels.triton_workload`: rotated inputs, NaN-poisoned outputs, every
one checked against the reference, Triton's errors mapped to
:class:`~flyconfigs.errors.CompileError` and :class:`~flyconfigs.errors.GPUError`,
resources).  docs/plugins.md opens with a whole worked example (``examples/acme-layernorm``).

``launch``, ``reference``, ``inputs`` and ``outputs`` may be callables or
``"module:attribute"`` references, imported only where the kernel runs, so the module
holding the declaration need not import torch or Triton (``flyconfigs explain`` and the
tuner's parent read it).  This module imports neither.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any

from flyconfigs.errors import TuneError
from flyconfigs.kernels.paired_evidence import DefaultUnlessEvidence, PairedEvidence
from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.kernels.rownorm import DTYPES, ELEMENT_BYTES, MAX_INDEX
from flyconfigs.kernels.triton_source import distribution_digest, source_digest
from flyconfigs.kernels.triton_traffic import meta_traffic
from flyconfigs.registry.plugin import DeviceQuery, KeyAxis, KeyValue, normalize_key

if TYPE_CHECKING:
    from flyconfigs.gpu import Backend
    from flyconfigs.kernels.triton_workload import TritonWorkload

__all__ = ["COSTLY_ELEMENTS_PER_THREAD", "ROW_AXES", "Ref", "TritonFamily", "config_product", "elements_per_thread",
           "load_ref", "same_config", "triton_versions", "tunable_values"]

logger = logging.getLogger("flyconfigs.kernels")

ROW_AXES = (
    KeyAxis("M", int, ordinal=True, minimum=1, maximum=MAX_INDEX),
    KeyAxis("N", int, ordinal=True, minimum=1, maximum=MAX_INDEX),
    KeyAxis("dtype", str, choices=DTYPES),
)
"""The key of a row-wise kernel: ``M`` rows of ``N`` columns (both ordinal) in ``dtype``."""

Ref = Callable[..., Any] | str
"""A callable, or ``"module:attribute"`` naming one (imported when first called)."""
Config = dict[str, KeyValue]
Key = Mapping[str, KeyValue]

COSTLY_ELEMENTS_PER_THREAD = 512
"""Above this many block elements per thread a Triton config compiles slowly (a
32768-element block on one warp, 1024 a thread, took 47 s on an H100): the tuner is
warned, and such configs are tried last."""


def elements_per_thread(config: Mapping[str, KeyValue]) -> float:
    """The estimated compile cost of a config: the product of its ``BLOCK*`` tunables
    over the threads of ``num_warps`` (default 4) warps of 32; 0 without a block."""
    blocks = [v for k, v in config.items() if k.upper().startswith("BLOCK") and type(v) is int]
    if not blocks:
        return 0.0
    warps = config.get("num_warps", 4)
    return math.prod(blocks) / (32 * (warps if type(warps) is int and warps > 0 else 4))


def _arity(function: Callable[..., Any]) -> int:
    """How many positional arguments ``function`` takes (``*args``: any)."""
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return 1
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 99
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def load_ref(ref: Ref, what: str) -> Callable[..., Any]:
    """The callable ``ref`` names; :class:`TuneError` naming ``what`` when it cannot be
    imported or is not callable."""
    if callable(ref):
        return ref
    module, _, attribute = ref.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise TuneError(f"{what} {ref!r} cannot be loaded ({type(exc).__name__}: {exc})") from None
    if not callable(found):
        raise TuneError(f"{what} {ref!r} is a {type(found).__name__}, not a callable")
    return found  # type: ignore[no-any-return]


def triton_versions() -> dict[str, str]:
    """Triton's version (it decides the code every config compiles to), or nothing when
    Triton is not installed."""
    try:
        return {"triton": metadata.version("triton")}
    except metadata.PackageNotFoundError:
        return {}


def config_product(values: Mapping[str, Sequence[KeyValue]]) -> list[Config]:
    """Every combination of ``values`` (tunable → the values it takes), in order."""
    names = list(values)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(values[n] for n in names))]


def _same(a: KeyValue, b: KeyValue) -> bool:
    # Typed: True is not 1, and 1.0 is not 1.
    return type(a) is type(b) and a == b


def same_config(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    """Whether two configs set the same tunables to the same values, typed (``True`` is
    not ``1``, ``1.0`` is not ``1``)."""
    return a.keys() == b.keys() and all(type(a[k]) is type(b[k]) and a[k] == b[k] for k in a)


def tunable_values(configs: Sequence[Mapping[str, KeyValue]]) -> dict[str, tuple[KeyValue, ...]]:
    """Each tunable of ``configs`` and the distinct values they give it (typed), in order
    of appearance."""
    values: dict[str, list[KeyValue]] = {}
    for config in configs:
        for name, value in config.items():
            seen = values.setdefault(name, [])
            if not any(_same(value, v) for v in seen):
                seen.append(value)
    return {name: tuple(v) for name, v in values.items()}


@dataclass(frozen=True)
class TritonFamily(TunableKernel, DefaultUnlessEvidence):
    """A row-wise Triton kernel family (a KernelDecl and a TunableKernel).

    ``configs``: the configs to search, as a list, or as each tunable's values (their
    product is the space).  ``default``: a config, ``default(key)`` or
    ``default(key, device)`` returning one (``device``: a
    :class:`~flyconfigs.registry.DeviceQuery`, ``None`` when unknown; ``device.vendor``
    is ``"amd"`` or ``"nvidia"``).  ``rules``: ``rules(config, key)`` → why a config of
    the declared set cannot run for ``key``, or ``None``.  ``adapt``:
    ``adapt(config, key, device)`` → a nearby key's winner made to fit ``key`` (checked
    like any config), or ``None``.

    ``inputs(key, device)`` makes one call's input tensors (default: ``x``, ``M × N`` of
    ``dtype``); ``outputs(*inputs)`` the output tensors the launch fills (default: one,
    shaped like the first input).  ``launch(config, *inputs, *outputs)`` runs the kernel
    (and returns what Triton's launch returns); ``reference(*inputs)`` gives the float64
    value of the output, or a tuple with one per output: every output is checked.

    ``traffic_bytes(key)``: bytes a call moves (default: the inputs read and the outputs
    written once, sized on torch's meta device in a child process when torch is not
    imported here).  ``source``: the module (``"module"`` or ``"module:attribute"``)
    whose file is the source digest (default: ``launch``'s), found without importing it;
    ``source_distribution``: bind to that installed distribution's version instead.
    ``compile_cost(config)``: the estimated cost that orders the space, cheapest first
    (default :func:`elements_per_thread`), so ``flyconfigs tune --budget N`` keeps the N
    cheapest.

    ``paired_evidence``: given (``PairedEvidence()``), between tuned keys the family serves
    ``default`` unless the measurements around the asked key say another config beats it
    (:mod:`flyconfigs.kernels.paired_evidence`), and ``transfers_past_range`` names the
    key axes (``("M",)``, say) whose winners may be carried past the largest or below the
    smallest tuned value (default: none); ``None`` (the default): the nearest key's
    winner serves, adapted where it must be.

    Raises ``TypeError`` for a declaration that misses a part it needs."""

    name: str
    configs: Sequence[Mapping[str, KeyValue]] | Mapping[str, Sequence[KeyValue]]
    default: Mapping[str, KeyValue] | Callable[..., Mapping[str, KeyValue]]
    launch: Ref
    reference: Ref
    version: int = 1
    key_axes: tuple[KeyAxis, ...] = ROW_AXES
    rules: Callable[[Key, Key], str | None] | None = None
    adapt: Callable[[Key, Key, DeviceQuery | None], Mapping[str, KeyValue] | None] | None = None
    inputs: Ref | None = None
    outputs: Ref | None = None
    traffic_bytes: Callable[[Key], int] | None = None
    source: str | None = None
    source_distribution: str | None = None
    compile_cost: Callable[[Key], float] = elements_per_thread
    presets: Mapping[str, Sequence[str]] = field(default_factory=dict)
    paired_evidence: PairedEvidence | None = None
    transfers_past_range: tuple[str, ...] = ()
    _listed: list[Config] = field(init=False, repr=False, compare=False)
    _tunables: dict[str, tuple[KeyValue, ...]] = field(init=False, repr=False, compare=False)
    _sized: dict[str, int] = field(init=False, repr=False, compare=False)
    _warned: set[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        listed = config_product(self.configs) if isinstance(self.configs, Mapping) else [dict(c) for c in self.configs]
        if not listed:
            raise TypeError(f"{self.name}: configs is empty; a family needs at least one config")
        names = set(listed[0])
        for i, config in enumerate(listed):
            if set(config) != names:
                raise TypeError(f"{self.name}: configs[{i}] names {sorted(config)}, configs[0] {sorted(names)}")
        if self.key_axes != ROW_AXES and self.inputs is None:
            raise TypeError(f"{self.name}: a key other than M, N, dtype needs inputs=(key, device) -> tensors")
        refs = (("launch", self.launch), ("reference", self.reference), ("inputs", self.inputs),
                ("outputs", self.outputs))
        for what, ref in refs:
            if ref is not None and not callable(ref) and (not isinstance(ref, str) or ":" not in ref):
                raise TypeError(f"{self.name}: {what} {ref!r} must be a callable or 'module:attribute'")
        if self.source is not None and self.source_distribution is not None:
            raise TypeError(f"{self.name}: give source= (bind to a module's file) or source_distribution= (bind to "
                            f"a distribution's version), not both")
        # Frozen: the expanded list and each tunable's values beside the declared form.
        object.__setattr__(self, "_listed", listed)
        object.__setattr__(self, "_tunables", tunable_values(listed))
        object.__setattr__(self, "_sized", {})
        object.__setattr__(self, "_warned", set())
        if not callable(self.default):
            # A fixed default is checked once here; one made per key is checked where it serves.
            why = self.undeclared(self.default)
            if why is not None:
                raise TypeError(f"{self.name}: the default {dict(self.default)} is not a declared config ({why})")

    # -- what the registry reads ------------------------------------------------------

    @property
    def tunables(self) -> dict[str, tuple[KeyValue, ...]]:
        """Each tunable and the values the configs give it, in order of appearance."""
        return dict(self._tunables)

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` checked against :attr:`key_axes`; :class:`~flyconfigs.errors.InvalidKeyError` naming the axis."""
        return normalize_key(self, key)

    def check_config(self, config: Mapping[str, object], key: Key, device: DeviceQuery | None) -> str | None:
        """``None`` when ``config`` is one of the declared configs (every tunable, each
        value of its declared set, and for a listed space one of the list) and the
        family's ``rules`` accept it for ``key``, else why not.  Triton runs on NVIDIA
        and AMD alike, so ``device`` decides nothing."""
        why = self.undeclared(config)
        if why is None and self.rules is not None:
            why = self.rules(config, key)
        return why

    def undeclared(self, config: Mapping[str, object]) -> str | None:
        """Why ``config`` is not one of the declared configs, or ``None`` (the rules aside)."""
        tunables = self._tunables
        missing = [name for name in tunables if name not in config]
        extra = sorted(str(name) for name in config if name not in tunables)
        if missing or extra:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else [])
            return f"not a {self.name} config: {'; '.join(parts)}"
        for name, allowed in tunables.items():
            if not any(_same(config[name], v) for v in allowed):
                return f"{name}={config[name]!r} is not one of {', '.join(map(repr, allowed))}"
        if not isinstance(self.configs, Mapping) and not any(same_config(config, c) for c in self._listed):
            return f"{dict(config)} is not one of the {len(self._listed)} configs {self.name} lists"
        return None

    def default_config(self, key: Key, device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The author's default for ``key`` (on ``device``, for a ``default(key, device)``)."""
        if not callable(self.default):
            return dict(self.default)
        return dict(self.default(key, device) if _arity(self.default) >= 2 else self.default(key))

    def adapt_config(self, config: Key, key: Key, device: DeviceQuery | None) -> dict[str, KeyValue] | None:
        """``adapt(config, key, device)``: a nearby key's winner made to fit ``key``, or
        ``None`` (also without ``adapt``); the registry checks what it returns."""
        if self.adapt is None:
            return None
        adapted = self.adapt(config, key, device)
        return None if adapted is None else dict(adapted)

    # -- what the tuner reads ---------------------------------------------------------

    def space(self, key: Key, device: DeviceQuery | None = None) -> list[Config]:
        """The declared configs that pass :meth:`check_config` for ``key``, cheapest to
        compile first (:attr:`compile_cost`; ties in declared order), the default first
        when it is not among them; never empty.  Configs above
        :data:`COSTLY_ELEMENTS_PER_THREAD` are logged once, at WARNING."""
        norm = self.check_key(key)
        out = [dict(c) for c in self._listed if self.check_config(c, norm, device) is None]
        out.sort(key=self.compile_cost)
        costly = [c for c in out if elements_per_thread(c) > COSTLY_ELEMENTS_PER_THREAD]
        if costly and "costly" not in self._warned:
            self._warned.add("costly")
            shown = "; ".join(" ".join(f"{k}={v}" for k, v in c.items()) for c in costly[:3])
            logger.warning("%s: %d configs hold more than %d block elements per thread (%s%s): Triton may take a "
                           "minute to compile each; they are tried last, and --budget N keeps the default and the "
                           "N-1 cheapest",
                           self.name, len(costly), COSTLY_ELEMENTS_PER_THREAD, shown, "; …" if len(costly) > 3 else "")
        default = self.default_config(norm, device)
        if not any(c == default for c in out):
            out.insert(0, default)
        return out

    def traffic(self, key: Key) -> int:
        """Bytes one call moves: ``traffic_bytes(key)``, else the inputs read and the
        outputs written once (with the default inputs and outputs,
        ``2 · M · N · sizeof(dtype)``); never imports torch in a process that has not."""
        if self.traffic_bytes is not None:
            return int(self.traffic_bytes(key))
        if self.inputs is None and self.outputs is None:
            return 2 * int(key["M"]) * int(key["N"]) * ELEMENT_BYTES[str(key["dtype"])]
        cache = repr(sorted(key.items()))
        if cache not in self._sized:
            inputs = self.inputs if self.inputs is not None else "flyconfigs.kernels.triton_workload:default_inputs"
            self._sized[cache] = meta_traffic(self.name, inputs, self.outputs, key, load_ref)
        return self._sized[cache]

    def source_sha256(self) -> str:
        """sha256 of ``source``'s module file (default: the module ``launch`` is in,
        found without importing it), or of ``source_distribution``'s name and version."""
        if self.source_distribution is not None:
            return distribution_digest(self.source_distribution, f"{self.name}: source_distribution")
        return source_digest(self.source if self.source is not None else self.launch, f"{self.name}: source")

    def build(self, config: Key, key: Key, device: DeviceQuery) -> None:
        """Nothing ahead: Triton compiles each variant on its first launch, in the
        measuring process, where a failure is that candidate's compile error."""
        return None

    def workload(self, key: Key, copies: int, backend: Backend | None = None,
                 device: str = "cuda") -> TritonWorkload:
        """``copies`` rotated inputs for ``key`` on ``device`` (imports torch and Triton)."""
        from flyconfigs.kernels.triton_workload import row_workload

        return row_workload(self, key, copies, device)

    def tool_versions(self) -> dict[str, str]:
        """Triton's version, recorded in each artifact's provenance."""
        return triton_versions()
