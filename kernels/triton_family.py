"""A row-wise Triton kernel declared, tuned and served in a few lines.

The author gives what only they know — the key axes (``M`` rows of ``N`` columns and the
``dtype`` by default), the configs (a list, or each tunable's values for their product),
the default, the launch and the float64 reference — and :class:`TritonFamily` is the
rest of the plugin protocol (a :class:`~flyconfigs.registry.KernelDecl` and a
:class:`~flyconfigs.kernels.plugin.TunableKernel`): membership of each config in the
declared set before the family's own rules, the space, the bytes a call moves, the
source digest, ``build()`` (``None``: Triton compiles on first launch), Triton's version
for the provenance, and a workload (:mod:`flyconfigs.kernels.triton_workload`: rotated
inputs, NaN-poisoned outputs checked against the reference, Triton's errors mapped to
:class:`~flyconfigs.errors.CompileError` and :class:`~flyconfigs.errors.GPUError`,
resources).  A whole declaration::

    from flyconfigs.kernels.triton_family import TritonFamily

    SPEC = TritonFamily(
        name="acme_softmax",
        configs={"BLOCK_N": (256, 1024, 4096), "num_warps": (1, 4, 8)},
        default=lambda key: {"BLOCK_N": 1024, "num_warps": 4},
        rules=lambda config, key: None if config["BLOCK_N"] >= key["N"] else "the row must fit one block",
        launch="acme_kernels.kernel:launch",        # launch(config, x, y): runs the kernel into y
        reference="acme_kernels.kernel:reference",  # reference(x): the float64 y
    )

``launch`` and ``reference`` (and ``inputs``) may be callables or ``"module:attribute"``
references, imported only where the kernel runs, so the module holding the declaration
need not import torch or Triton (``flyconfigs explain`` and the tuner's parent read it).
This module imports neither.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any

from flyconfigs.errors import TuneError
from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.kernels.rownorm import DTYPES, ELEMENT_BYTES, MAX_INDEX
from flyconfigs.registry.declarations import KeyAxis, KeyValue, normalize_key
from flyconfigs.registry.device import DeviceQuery

if TYPE_CHECKING:
    from flyconfigs.gpu import Backend
    from flyconfigs.kernels.triton_workload import TritonWorkload

__all__ = ["ROW_AXES", "Ref", "TritonFamily", "config_product", "load_ref", "same_config", "triton_versions",
           "tunable_values"]

ROW_AXES = (
    KeyAxis("M", int, ordinal=True, minimum=1, maximum=MAX_INDEX),
    KeyAxis("N", int, ordinal=True, minimum=1, maximum=MAX_INDEX),
    KeyAxis("dtype", str, choices=DTYPES),
)
"""The key of a row-wise kernel: ``M`` rows of ``N`` columns (both ordinal) in ``dtype``."""

Ref = Callable[..., Any] | str
"""A callable, or ``"module:attribute"`` naming one (imported when first called)."""
Config = dict[str, KeyValue]


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


def _source_text(ref: Ref, what: str) -> str:
    """The source of the module ``ref`` lives in, read without importing it when ``ref``
    is a string (only its parent packages are imported to find it)."""
    if callable(ref):
        module = inspect.getmodule(ref)
        try:
            return inspect.getsource(module if module is not None else ref)
        except (OSError, TypeError) as exc:
            raise TuneError(f"the source of {what} {ref!r} cannot be read ({exc})") from None
    name = ref.partition(":")[0]
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise TuneError(f"{what} {ref!r}: module {name!r} cannot be found ({exc})") from None
    if spec is None or spec.origin is None or not spec.has_location:
        raise TuneError(f"{what} {ref!r}: module {name!r} has no source file")
    with open(spec.origin, encoding="utf-8") as handle:
        return handle.read()


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
class TritonFamily(TunableKernel):
    """A row-wise Triton kernel family (a KernelDecl and a TunableKernel).

    ``configs``: the configs to search, as a list, or as each tunable's values (their
    product is the space).  ``default``: a config, or ``default(key)`` returning one.
    ``rules``: ``rules(config, key)`` → why a config of the declared set cannot run for
    ``key``, or ``None``.  ``launch(config, *inputs, out)`` runs the kernel (and returns
    what Triton's launch returns); ``reference(*inputs)`` the float64 ``out``.
    ``inputs(key, device)`` makes one call's input tensors (default: ``x``, ``M × N`` of
    ``dtype``); ``out`` has the first input's shape and dtype.  ``traffic(key)``: bytes a
    call moves (default: the inputs read and ``out`` written once).  ``source``: the
    module (``"module"``) whose text is the source digest (default: ``launch``'s).

    Raises ``TypeError`` for a declaration that misses a part it needs."""

    name: str
    configs: Sequence[Mapping[str, KeyValue]] | Mapping[str, Sequence[KeyValue]]
    default: Mapping[str, KeyValue] | Callable[[Mapping[str, KeyValue]], Mapping[str, KeyValue]]
    launch: Ref
    reference: Ref
    version: int = 1
    key_axes: tuple[KeyAxis, ...] = ROW_AXES
    rules: Callable[[Mapping[str, KeyValue], Mapping[str, KeyValue]], str | None] | None = None
    inputs: Ref | None = None
    traffic_bytes: Callable[[Mapping[str, KeyValue]], int] | None = None
    source: str | None = None
    presets: Mapping[str, Sequence[str]] = field(default_factory=dict)
    _listed: list[Config] = field(init=False, repr=False, compare=False)
    _tunables: dict[str, tuple[KeyValue, ...]] = field(init=False, repr=False, compare=False)

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
        for what, ref in (("launch", self.launch), ("reference", self.reference), ("inputs", self.inputs)):
            if ref is not None and not callable(ref) and (not isinstance(ref, str) or ":" not in ref):
                raise TypeError(f"{self.name}: {what} {ref!r} must be a callable or 'module:attribute'")
        # Frozen: the expanded list and each tunable's values beside the declared form.
        object.__setattr__(self, "_listed", listed)
        object.__setattr__(self, "_tunables", tunable_values(listed))
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

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
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

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The author's default for ``key``."""
        return dict(self.default(key) if callable(self.default) else self.default)

    # -- what the tuner reads ---------------------------------------------------------

    def space(self, key: Mapping[str, KeyValue], device: DeviceQuery | None = None) -> list[Config]:
        """The declared configs that pass :meth:`check_config` for ``key``, the default
        first when it is not among them; never empty."""
        norm = self.check_key(key)
        out = [dict(c) for c in self._listed if self.check_config(c, norm, device) is None]
        default = self.default_config(norm, device)
        if not any(c == default for c in out):
            out.insert(0, default)
        return out

    def traffic(self, key: Mapping[str, KeyValue]) -> int:
        """Bytes one call moves: ``traffic_bytes(key)``, else the inputs read and the
        output written once (with the default inputs, ``2 · M · N · sizeof(dtype)``)."""
        if self.traffic_bytes is not None:
            return int(self.traffic_bytes(key))
        if self.inputs is None:
            return 2 * int(key["M"]) * int(key["N"]) * ELEMENT_BYTES[str(key["dtype"])]
        from flyconfigs.kernels.triton_workload import tensor_bytes

        # Made on torch's meta device: shapes and dtypes, no memory.
        inputs = load_ref(self.inputs, f"{self.name}: inputs")(key, "meta")
        return tensor_bytes(inputs) + tensor_bytes(inputs[:1])

    def source_sha256(self) -> str:
        """sha256 of the source of ``source`` (default: the module ``launch`` is in)."""
        text = _source_text(self.source if self.source is not None else self.launch, f"{self.name}: source")
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def build(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue], device: DeviceQuery) -> None:
        """Nothing ahead: Triton compiles each variant on its first launch, in the
        measuring process, where a failure is that candidate's compile error."""
        return None

    def workload(self, key: Mapping[str, KeyValue], copies: int, backend: Backend | None = None,
                 device: str = "cuda") -> TritonWorkload:
        """``copies`` rotated inputs for ``key`` on ``device`` (imports torch and Triton)."""
        from flyconfigs.kernels.triton_workload import row_workload

        return row_workload(self, key, copies, device)

    def tool_versions(self) -> dict[str, str]:
        """Triton's version, recorded in each artifact's provenance."""
        return triton_versions()
