"""A drop-in for ``triton.autotune`` that serves tuned configs from the registry.

Replace ``@triton.autotune(configs=[...], key=[...])`` with
``@flyconfigs.kernels.triton_autotune.autotune(family="name", configs=[...], key=[...])``
(Triton's other arguments pass through).  At each call the kernel's key — the values of
the ``key`` arguments and ``dtype``, the dtype of its first tensor argument — is resolved
through :func:`flyconfigs.resolve` for the tensor's device:

* an artifact that matches serves its config (one of ``configs``; the resolver checked it
  is) with no search;
* otherwise ``fallback="triton"`` (the default) runs Triton's own autotune over
  ``configs``, as the undecorated kernel would, and ``fallback="default"`` runs the
  default (``default=``, one of ``configs`` or ``default(key)`` returning one; the first
  config when not given) with no search.

A call never raises for what is installed: a key the registry cannot take (a key argument
that is not an int) or a device it cannot identify is logged and falls back the same way.

The decorated kernel's ``family`` is its declaration (a
:class:`~flyconfigs.registry.KernelDecl` and a
:class:`~flyconfigs.kernels.plugin.TunableKernel`), registered in-process when the
decorator runs.  ``flyconfigs tune NAME`` searches exactly ``configs`` once the family is
declared through the ``flyconfigs.kernels`` entry-point group (``NAME =
"package.module:kernel.family"``), and, on a GPU, when ``grid=``, ``inputs=`` and
``reference=`` say how to call it (see :func:`autotune`).  Importing this module imports
neither torch nor Triton.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, SupportsIndex

from flyconfigs.errors import FlyconfigsError, TuneError
from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.kernels.triton_family import Ref, load_ref, same_config, triton_versions, tunable_values
from flyconfigs.registry import Resolution, register_kernel, resolve
from flyconfigs.registry.plugin import NAME_PATTERN, DeviceQuery, KeyAxis, KeyValue, normalize_key

if TYPE_CHECKING:
    from flyconfigs.gpu import Backend
    from flyconfigs.kernels.triton_workload import TritonWorkload

__all__ = ["FALLBACKS", "AutotuneFamily", "RegistryAutotuner", "autotune", "config_dict"]

FALLBACKS = ("triton", "default")
OPTIONAL_OPTIONS = (("num_ctas", 1), ("maxnreg", None))
"""Triton launch options a config carries only when some config sets them (value when unset)."""
logger = logging.getLogger("flyconfigs.kernels")


def config_dict(config: Any, optional: Sequence[str] = ()) -> dict[str, KeyValue]:
    """A ``triton.Config`` as a flyconfigs config: its kwargs, ``num_warps``,
    ``num_stages``, and those of ``optional`` (``num_ctas``, ``maxnreg``) named."""
    out: dict[str, KeyValue] = dict(config.kwargs)
    out["num_warps"], out["num_stages"] = config.num_warps, config.num_stages
    for name in optional:
        out[name] = getattr(config, name)
    return out


class AutotuneFamily(TunableKernel):
    """The declaration of a kernel decorated with :func:`autotune`: its key is the
    ``key`` arguments (ints, ordinal) and ``dtype``; its space is exactly ``configs``."""

    name: str
    version: int
    key_axes: tuple[KeyAxis, ...]
    presets: Mapping[str, Sequence[str]]

    def __init__(self, name: str, fn: Any, configs: Sequence[Any], key: Sequence[str], default: Any, version: int,
                 grid: Callable[..., Any] | None, inputs: Ref | None, reference: Ref | None,
                 traffic: Callable[[Mapping[str, KeyValue]], int] | None,
                 presets: Mapping[str, Sequence[str]] | None) -> None:
        self.name, self.version, self.fn = name, version, fn
        self.key_names = tuple(key)
        axes = [KeyAxis(k, int, ordinal=True) for k in key]
        self.key_axes = tuple(axes if "dtype" in key else [*axes, KeyAxis("dtype", str)])
        optional = [n for n, unset in OPTIONAL_OPTIONS if any(getattr(c, n, unset) != unset for c in configs)]
        self.triton_configs = list(configs)
        self.configs = [config_dict(c, optional) for c in configs]
        self._tunables = tunable_values(self.configs)
        self._default = default
        self.grid, self.inputs, self.reference, self._traffic = grid, inputs, reference, traffic
        self.presets = dict(presets or {})

    @property
    def tunables(self) -> dict[str, tuple[KeyValue, ...]]:
        """Each tunable and the values ``configs`` give it, in order of appearance."""
        return dict(self._tunables)

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` checked against the axes; :class:`~flyconfigs.errors.InvalidKeyError` naming the axis."""
        return normalize_key(self, key)

    def index_of(self, config: Mapping[str, object]) -> int | None:
        """Where ``config`` is in ``configs``, or ``None``."""
        return next((i for i, c in enumerate(self.configs) if same_config(c, config)), None)

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
        """``None`` when ``config`` is one of ``configs``, else why not."""
        if self.index_of(config) is None:
            return f"{dict(config)} is not one of the {len(self.configs)} configs {self.name} is autotuned over"
        return None

    def default_triton_config(self, key: Mapping[str, KeyValue]) -> Any:
        """The author's default for ``key`` (a ``triton.Config`` of ``configs``); the first
        config when none was given.  :class:`TuneError` for one not in ``configs``."""
        chosen = self._default(key) if callable(self._default) else self._default
        if chosen is None:
            return self.triton_configs[0]
        if chosen in self.triton_configs:
            return self.triton_configs[self.triton_configs.index(chosen)]
        raise TuneError(f"{self.name}: the default {chosen} is not one of the configs")

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """:meth:`default_triton_config` as a config."""
        return dict(self.configs[self.triton_configs.index(self.default_triton_config(key))])

    # -- what the tuner reads ---------------------------------------------------------

    def space(self, key: Mapping[str, KeyValue], device: DeviceQuery | None = None) -> list[dict[str, KeyValue]]:
        """Exactly ``configs``, in the order given."""
        self.check_key(key)
        return [dict(c) for c in self.configs]

    def traffic(self, key: Mapping[str, KeyValue]) -> int:
        """Bytes one call moves: ``traffic(key)``, else every tensor argument ``inputs``
        makes, read or written once; :class:`TuneError` when neither was given."""
        if self._traffic is not None:
            return int(self._traffic(key))
        if self.inputs is None:
            raise TuneError(f"{self.name} declares neither traffic= nor inputs=: the tuner cannot size a call")
        from flyconfigs.kernels.triton_traffic import meta_traffic

        # Made on torch's meta device (shapes and dtypes, no memory), in a child process
        # where this one has not imported torch: the tuner's parent never does.
        return meta_traffic(self.name, self.inputs, None, key, load_ref, outputs_in_inputs=True)

    def source_sha256(self) -> str:
        """sha256 of the decorated function's source."""
        base = self.fn
        while not inspect.isfunction(base):
            base = base.fn
        return hashlib.sha256(inspect.getsource(base).encode("utf-8")).hexdigest()

    def build(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue], device: DeviceQuery) -> None:
        """Nothing ahead: Triton compiles each variant on its first launch."""
        return None

    def launch(self, config: Mapping[str, KeyValue], args: Mapping[str, Any]) -> Any:
        """One launch of ``config`` (one of ``configs``) with ``args`` by name on ``grid``."""
        if self.grid is None:
            raise TuneError(f"{self.name} declares no grid=: the tuner cannot launch it")
        index = self.index_of(config)
        if index is None:
            raise TuneError(f"{dict(config)} is not one of the configs of {self.name}")
        chosen = self.triton_configs[index]
        if chosen.pre_hook is not None:
            chosen.pre_hook({**args, **chosen.all_kwargs()})
        return self.fn[self.grid](**args, **chosen.all_kwargs())

    def workload(self, key: Mapping[str, KeyValue], copies: int, backend: Backend | None = None,
                 device: str = "cuda") -> TritonWorkload:
        """``copies`` argument sets from ``inputs(key, device)``, checked against
        ``reference(args)`` (imports torch and Triton)."""
        from flyconfigs.kernels.triton_workload import TritonWorkload

        if self.inputs is None or self.reference is None or self.grid is None:
            raise TuneError(f"{self.name} is served but cannot be timed: autotune() was given no "
                            f"{', '.join(n for n in ('grid', 'inputs', 'reference') if getattr(self, n) is None)}")
        make = load_ref(self.inputs, f"{self.name}: inputs")
        reference = load_ref(self.reference, f"{self.name}: reference")
        norm = self.check_key(key)
        return TritonWorkload(lambda: dict(make(norm, device)), reference, self.launch, copies, device)

    def tool_versions(self) -> dict[str, str]:
        """Triton's version, recorded in each artifact's provenance."""
        return triton_versions()


class RegistryAutotuner:
    """A ``@triton.jit`` function whose configs come from the registry (see the module's
    docstring); launched like Triton's autotuned kernels, ``kernel[grid](*args)``.

    ``resolution``: the last call's :class:`~flyconfigs.registry.Resolution` (``None``
    when its key could not be resolved); ``best_config``: the ``triton.Config`` it ran
    (Triton's choice after a search); ``searches``: how many keys Triton searched."""

    def __init__(self, fn: Any, family: AutotuneFamily, fallback: str, triton_options: Mapping[str, Any]) -> None:
        self.fn = fn
        self.family = family
        self.fallback = fallback
        self.arg_names: list[str] = list(fn.arg_names)
        self._options = dict(triton_options)
        prune = (self._options.get("prune_configs_by") or {})
        self._prune: Callable[..., Any] | None = prune.get("early_config_prune") if isinstance(prune, Mapping) else None
        self._triton: Any = None
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        self._served: dict[int, tuple[Resolution, Any]] = {}
        self.resolution: Resolution | None = None
        self.best_config: Any = None
        self.searches = 0

    @property
    def configs(self) -> list[Any]:
        """The ``triton.Config`` list, as Triton's autotuner names it."""
        return self.family.triton_configs

    @property
    def keys(self) -> list[str]:
        """The key arguments, as Triton's autotuner names them."""
        return list(self.family.key_names)

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    def warmup(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        """Compile what this call would run without running it: the served config, or
        every config where Triton's autotune decides, as Triton's warmup does."""
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def _key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[dict[str, object], Any]:
        """The call's key and its first tensor argument."""
        from flyconfigs.kernels.torch_dtypes import NAME_OF

        named = {**dict(zip(self.arg_names, args, strict=False)), **kwargs}
        tensor = next((v for v in named.values() if hasattr(v, "dtype") and hasattr(v, "device")), None)
        key: dict[str, object] = {}
        for name in self.family.key_names:
            value = named.get(name)
            # numpy and torch integers are sizes too; bools are not.
            key[name] = operator.index(value) if isinstance(value, SupportsIndex) and not isinstance(value, bool) else value
        if "dtype" not in key and tensor is not None:
            key["dtype"] = NAME_OF.get(tensor.dtype) or str(tensor.dtype).removeprefix("torch.")
        return key, tensor

    def _warn(self, text: str) -> None:
        if text not in self._logged:
            self._logged.add(text)
            logger.warning("%s", text)

    def _resolve(self, key: Mapping[str, object], tensor: Any) -> Resolution | None:
        device: DeviceQuery | None = None
        try:
            if tensor is not None and tensor.device.type == "cuda":
                from flyconfigs.kernels.triton_config import device_query

                device = device_query(tensor.device)
            return resolve(self.family, key, device)
        except FlyconfigsError as exc:
            self._warn(f"{self.family.name}: {exc}; falling back to {self.fallback}")
            return None

    def _autotuner(self) -> Any:
        with self._lock:
            if self._triton is None:
                import triton

                self._triton = triton.autotune(self.family.triton_configs, list(self.family.key_names),
                                               **self._options)(self.fn)
            return self._triton

    def choose(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """The ``triton.Config`` to run for a call with ``args`` and ``kwargs`` without a
        search, or ``None`` when Triton's autotune decides (sets :attr:`resolution`).

        A served config the author's own ``prune_configs_by`` ``early_config_prune``
        removes for this call's arguments is never run (Triton would never run it for
        them: a config tuned at a nearby key may not fit this one); the call falls back
        as if nothing were served, with one warning per key."""
        key, tensor = self._key(args, kwargs)
        resolution = self.resolution = self._resolve(key, tensor)
        if resolution is not None and resolution.source != "default":
            # The resolver memoizes a key's resolution: look its config up (and prune) once.
            served = self._served.get(id(resolution))
            if served is None or served[0] is not resolution:
                index = self.family.index_of(resolution.config)
                chosen = self.family.triton_configs[index] if index is not None else None
                if chosen is not None and not self._survives_prune(chosen, args, kwargs, key):
                    chosen = None
                served = (resolution, chosen)
                if len(self._served) > 4096:
                    self._served.clear()
                self._served[id(resolution)] = served
            if served[1] is not None:
                return served[1]
        if self.fallback == "default":
            try:
                default = self.family.default_triton_config(resolution.key if resolution is not None else key)
            except TuneError as exc:
                self._warn(f"{exc}; falling back to triton")
                return None
            return default if self._prune is None or self._survives_prune(default, args, kwargs, key) else None
        return None

    def _survives_prune(self, chosen: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                        key: Mapping[str, object]) -> bool:
        """Whether the author's ``early_config_prune`` keeps ``chosen`` for this call, as
        Triton's autotuner calls it (the configs, the arguments by name, the keywords)."""
        if self._prune is None:
            return True
        named = dict(zip(self.arg_names, args, strict=False))
        try:
            kept = list(self._prune(list(self.family.triton_configs), named, **kwargs))
        except Exception as exc:  # noqa: BLE001 - the author's function failing: serve nothing it did not approve
            self._warn(f"{self.family.name}: prune_configs_by raised {type(exc).__name__}: {exc}; falling back to "
                       f"{self.fallback}")
            return False
        if any(c is chosen for c in kept):
            return True
        self._warn(f"{self.family.name} {dict(key)}: the served config {self.family.configs[self.family.triton_configs.index(chosen)]} "
                   f"is pruned by the kernel's own prune_configs_by for this call; falling back to {self.fallback}")
        return False

    def run(self, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
        """Launch with the registry's config for this call's key, else the fallback."""
        chosen = self.choose(args, kwargs)
        if chosen is None:
            tuner = self._autotuner()
            searched = len(tuner.cache)
            out = (tuner.warmup(*args, grid=grid, **kwargs) if warmup
                   else tuner.run(*args, grid=grid, warmup=False, **kwargs))
            self.searches += len(tuner.cache) - searched
            self.best_config = getattr(tuner, "best_config", None)
            return out
        self.best_config = chosen
        if chosen.pre_hook is not None and not warmup:
            chosen.pre_hook({**dict(zip(self.arg_names, args, strict=False)), **kwargs, **chosen.all_kwargs()})
        return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs, **chosen.all_kwargs())


def autotune(family: str, configs: Sequence[Any], key: Sequence[str], *, fallback: Literal["triton", "default"] = "triton",
             default: Any = None, version: int = 1, grid: Callable[..., Any] | None = None, inputs: Ref | None = None,
             reference: Ref | None = None, traffic: Callable[[Mapping[str, KeyValue]], int] | None = None,
             presets: Mapping[str, Sequence[str]] | None = None,
             **triton_options: Any) -> Callable[[Any], RegistryAutotuner]:
    """``triton.autotune(configs, key, **triton_options)`` that serves the registry's
    config for family ``family`` first (see the module's docstring).

    ``fallback``: ``"triton"`` or ``"default"``.  ``default``: a config of ``configs`` or
    ``default(key)`` returning one (first config when ``None``).  ``version``: the
    family version (bump it when a config's meaning changes).  For tuning on a GPU:
    ``grid`` (Triton's launch grid, a tuple or ``grid(meta)``), ``inputs(key, device)``
    (one call's arguments by name, without the tuned ones) and ``reference(args)`` (the
    float64 value of each output argument, by name); ``traffic(key)`` (bytes a call
    moves; default: the tensors ``inputs`` makes); ``presets`` (named key grids).

    Raises ``ValueError`` for a fallback, family name, config list or key that cannot be
    used, when the decorator is applied or made."""
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {', '.join(FALLBACKS)}, got {fallback!r}")
    if not isinstance(family, str) or not NAME_PATTERN.fullmatch(family):
        raise ValueError(f"family must be a kernel name (letters, digits, '_', '.', '-'), got {family!r}")
    configs = list(configs)
    if not configs or not all(hasattr(c, "kwargs") and hasattr(c, "all_kwargs") for c in configs):
        raise ValueError(f"{family}: configs must be a non-empty list of triton.Config")

    for i, config in enumerate(configs):
        odd = {k: v for k, v in config.kwargs.items() if v is not None and type(v) not in (bool, int, float, str)}
        if odd:
            raise ValueError(f"{family}: configs[{i}] has values an artifact cannot hold (not a bool, int, float, str "
                             f"or None): {odd}")

    def decorate(fn: Any) -> RegistryAutotuner:
        unknown = [k for k in key if k not in fn.arg_names]
        if unknown:
            raise ValueError(f"{family}: key names {', '.join(unknown)}, which are not arguments of the kernel "
                             f"({', '.join(fn.arg_names)})")
        decl = AutotuneFamily(family, fn, configs, key, default, version, grid, inputs, reference, traffic, presets)
        if not callable(default) and default is not None and default not in configs:
            raise ValueError(f"{family}: default= must be one of the configs or a function of the key")
        register_kernel(decl)
        return RegistryAutotuner(fn, decl, fallback, triton_options)

    return decorate
