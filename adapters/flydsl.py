"""FlyDSL's ``Autotuner`` served from installed flyconfigs packages.

FlyDSL resolves a call's config in this order: its in-process and on-disk cache, its
offline config folder (``FLYDSL_AUTOTUNE_CONFIG_DIR``), the tuner's ``default`` hook, and
else a search (always a search under ``FLYDSL_AUTOTUNE=1``).  :func:`serve` installs a
``default`` hook that asks the registry first, by FlyDSL's own identity of the call: the
kernel ``flydsl.<artifact_name>`` (FlyDSL's kernels have a namespace of their own, see
:mod:`flyconfigs.kernels.flydsl`), its ``key`` parameters as FlyDSL records them (a
tensor's shape as a list, a dtype as its string) and the exact device (its product, arch
and compute units; ``borrow=True`` also takes a config tuned on another device of the
arch).  When the registry has nothing for the call, or only a config FlyDSL's own loader
would refuse for it, the hook falls through to what FlyDSL would have done: the tuner's
own ``default``, else its search, whose winner FlyDSL caches.

The device is the one given, else flyconfigs' (``FLYCONFIGS_DEVICE``, its GPU layer),
else FlyDSL's own descriptor of the call's device.  A call the hook has answered before
(same key values, same arguments passed, same registry generation) is answered from a
dictionary.  ``flydsl`` is imported when the hook first needs it.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, cast

from flyconfigs.errors import ConfigurationError, FlyconfigsError, InvalidKeyError
from flyconfigs.kernels.flydsl import COMPILER_OPTIONS, FlyDSLKernel, kernel_name_of, knob_problem
from flyconfigs.registry import default_resolver, kernel_declaration
from flyconfigs.registry.declarations import KernelDecl, KeyValue
from flyconfigs.registry.resolve import Resolution, Resolver
from flyconfigs.registry.sources.device import DeviceQuery, as_query
from flyconfigs.schema.models import DeviceIdentity

__all__ = ["FlyDSLKernel", "RegistryDefault", "flydsl_key", "serve"]

logger = logging.getLogger(__name__)

_MISS: Any = object()


def _signature(fn: Any) -> inspect.Signature:
    # FlyDSL reads the signature of a @jit function's wrapped ``func``, else of the callable.
    return inspect.signature(fn.func if hasattr(fn, "func") else fn)


def _recorded(value: Any) -> Any:
    """A key value as FlyDSL records it: a tensor's shape, a dtype's string, else itself."""
    if hasattr(value, "shape"):
        return list(value.shape)
    if hasattr(value, "dtype"):
        return str(value.dtype)
    return value


def flydsl_key(signature: inspect.Signature, key: tuple[str, ...], args: tuple[Any, ...],
               kwargs: Mapping[str, Any]) -> dict[str, KeyValue]:
    """The key FlyDSL records for a call: each ``key`` parameter's value, a tensor's shape
    as a list and a dtype as its string, as JSON reads it back.  Raises
    :class:`InvalidKeyError` for a call that does not bind or a value JSON cannot hold."""
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError as exc:
        raise InvalidKeyError(f"the call does not match the kernel's signature: {exc}") from None
    bound.apply_defaults()
    out: dict[str, Any] = {}
    for name in key:
        if name not in bound.arguments:
            raise InvalidKeyError(f"key parameter {name!r} is missing from the call")
        out[name] = _recorded(bound.arguments[name])
    try:
        # FlyDSL hashes the key's JSON: a tuple is a list there, and NaN has no JSON.
        return dict(json.loads(json.dumps(out, allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise InvalidKeyError(f"a key value is not JSON: {exc}") from None


def _loader_problem(signature: inspect.Signature, key: tuple[str, ...], config: Mapping[str, Any],
                    args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
    """Why FlyDSL's offline loader would refuse ``config`` for this call (it would
    override an argument of the call or a key parameter, a compiler option is not an int,
    a value does not match its parameter's annotation, or the call is still incomplete),
    or ``None``."""
    if "pre_hook" in config:
        return "a stored config cannot hold a pre_hook"
    injected = {k: v for k, v in config.items() if k not in COMPILER_OPTIONS}
    try:
        called = set(signature.bind_partial(*args, **kwargs).arguments)
    except TypeError as exc:
        return f"the call does not bind ({exc})"
    for name, parameter in signature.parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD and name in called:
            called |= set(kwargs) - set(signature.parameters)
    overlap = sorted((set(injected) & called) | (set(config) & set(key)))
    if overlap:
        return f"it would override the call's {', '.join(overlap)}"
    for name in COMPILER_OPTIONS:
        if name in config and type(config[name]) is not int:
            return f"{name}={config[name]!r} is not an int"
    for name, value in injected.items():
        annotation = signature.parameters[name].annotation if name in signature.parameters else inspect.Parameter.empty
        if annotation is not inspect.Parameter.empty:
            why = knob_problem(name, value, annotation)
            if why is not None:
                return why
    try:
        signature.bind(*args, **{**kwargs, **injected})
    except TypeError as exc:
        return f"it does not complete the kernel's signature ({exc})"
    return None


class RegistryDefault:
    """The ``default`` hook :func:`serve` installs on a FlyDSL ``Autotuner``: the registry's
    config for the call, else the tuner's previous ``default``, else FlyDSL's search.
    Never raises for what the registry holds; whatever FlyDSL's own fallback raises, it
    raises.  Safe to call from several threads at once.  ``last`` is the latest
    resolution, for inspection."""

    def __init__(self, tuner: Any, fallback: Callable[..., Any] | None, device: DeviceIdentity | DeviceQuery | str | None,
                 resolver: Resolver | None, borrow: bool = False) -> None:
        self.tuner = tuner
        self.fallback = fallback
        self.device = None if device is None else as_query(device)
        self.resolver = resolver
        self.signature = _signature(tuner.fn)
        self.key = tuple(tuner.key)
        self.borrow = borrow
        self.last: Resolution | None = None
        self.declaration: KernelDecl = self._declaration(str(tuner.artifact_name))
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._memo: dict[tuple[Any, ...], Any] = {}
        self._generation = -1
        self._devices: dict[Any, DeviceQuery | None] = {}
        self._current: Any = _MISS
        params = list(self.signature.parameters.values())
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self._slots = tuple((name, next((i for i, p in enumerate(params) if p.name == name and p.kind in positional),
                                        None), self.signature.parameters[name].default) for name in self.key)

    def _declaration(self, artifact_name: str) -> KernelDecl:
        """The installed declaration of ``flydsl.<artifact_name>`` (FlyDSL's own RMSNorm,
        or one a package declares), else one made from the kernel's signature."""
        name = kernel_name_of(artifact_name)
        try:
            decl = kernel_declaration(name)
        except FlyconfigsError:
            return FlyDSLKernel.of_signature(artifact_name, self.key, self.signature, borrow=self.borrow)
        if not isinstance(decl, FlyDSLKernel) or decl.borrow == self.borrow:
            # The installed object itself: the call keeps its record, so its owning
            # distribution (and the owner's packages' standing) and the shared memo.
            return decl
        return decl.borrowing(self.borrow)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        config = self._from_registry(args, kwargs)
        if config is not None:
            return config
        if self.fallback is not None:
            return self.fallback(*args, **kwargs)
        # FlyDSL's own order without this hook is a search.  It runs on a copy of the
        # tuner without the hook (sharing FlyDSL's cache, which keeps the winner), never
        # by taking the hook off the shared tuner: another thread's call would miss it.
        searcher = copy.copy(self.tuner)
        searcher.default = None
        return searcher.resolve_config(*args, **kwargs)

    def _from_registry(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        resolver = self.resolver or default_resolver()
        generation = resolver.generation
        if self._generation != generation:  # a refresh: packages may have come or gone
            with self._lock:
                self._memo.clear()
                self._current = _MISS
                self._generation = generation
        device = self.device or self._device(resolver, args, kwargs)
        memo_key: Any = self._memo_key(args, kwargs, device)
        try:
            hit = self._memo.get(memo_key, _MISS)
        except TypeError:  # a key value that cannot be hashed: the registry is asked each time
            hit = memo_key = _MISS
        if hit is not _MISS:
            self.last = hit[1]
            return hit[0]
        config, resolution = self._resolve(resolver, device, args, kwargs)
        if memo_key is not _MISS and generation == resolver.generation:
            with self._lock:
                self._memo[memo_key] = (config, resolution)
        return config

    def _memo_key(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], device: DeviceQuery | None) -> tuple[Any, ...]:
        """What the answer depends on: the device, which arguments the call passes and its
        key values, typed (``1`` is not ``True``); unhashable when a key value is."""
        values: list[Any] = [device, len(args), tuple(kwargs)]
        for name, position, default in self._slots:
            value = _recorded(args[position] if position is not None and position < len(args)
                              else kwargs.get(name, default))
            values.append((value.__class__, tuple(value) if value.__class__ is list else value))
        return tuple(values)

    def _device(self, resolver: Resolver, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> DeviceQuery | None:
        """flyconfigs' current device, else FlyDSL's own descriptor of the call's device."""
        if self._current is _MISS:
            self._current = resolver.current_device()[0]
        if self._current is not None:
            return cast(DeviceQuery, self._current)
        # The module (``flydsl.autotune``, the package's attribute, is the decorator).
        flydsl_autotune = importlib.import_module("flydsl.autotune")
        call_device = getattr(self.tuner, "_call_device", None)
        where = call_device(args, kwargs) if callable(call_device) else None
        if where not in self._devices:
            describe = getattr(flydsl_autotune, "_device_descriptor", None)
            found = describe(where) if callable(describe) else None
            try:
                self._devices[where] = None if found is None else DeviceQuery(
                    "amd", found["arch"], found["name"], found["compute_units"], None)
            except (KeyError, TypeError):
                self._devices[where] = None
        return self._devices[where]

    def _resolve(self, resolver: Resolver, device: DeviceQuery | None, args: tuple[Any, ...],
                 kwargs: Mapping[str, Any]) -> tuple[Any, Resolution | None]:
        name = self.declaration.name
        try:
            key = flydsl_key(self.signature, self.key, args, kwargs)
            resolution = resolver.resolve(self.declaration, key, device)
        except FlyconfigsError as exc:
            self._warn(f"{name}: not served from the registry ({exc}); FlyDSL's own order decides")
            return None, None
        self.last = resolution
        if resolution.source == "default":
            return None, resolution
        why = _loader_problem(self.signature, self.key, resolution.config, args, kwargs)
        if why is not None:
            self._warn(f"{name}: {resolution.file} not served: {why}; FlyDSL's own order decides")
            return None, resolution
        from flydsl.autotune import Config

        return Config.from_dict(dict(resolution.config)), resolution

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            logger.warning(message)


def serve(tuner: Any = None, *, device: DeviceIdentity | DeviceQuery | str | None = None,
          resolver: Resolver | None = None, borrow: bool = False) -> Any:
    """Make the FlyDSL ``Autotuner`` ``tuner`` ask the registry before its own ``default``
    and search; returns ``tuner``.  Used as ``@serve`` or ``@serve(borrow=True)`` above
    ``@autotune``, or called on a tuner.

    ``tuner`` must have an ``artifact_name`` (it is served as ``flydsl.<artifact_name>``).
    ``device`` is the device to serve (default: flyconfigs' current device, else FlyDSL's
    descriptor of the call's device).  ``borrow`` also serves a config tuned on another
    device of the same arch (FlyDSL itself serves the exact device only).  Raises
    :class:`~flyconfigs.errors.ConfigurationError` for a tuner without an
    ``artifact_name``, or one longer than the namespace holds."""
    if tuner is None:
        return lambda actual: serve(actual, device=device, resolver=resolver, borrow=borrow)
    if getattr(tuner, "artifact_name", None) is None:
        raise ConfigurationError("serve() needs a FlyDSL Autotuner with an artifact_name: it is the kernel's name in the registry")
    previous = tuner.default.fallback if isinstance(tuner.default, RegistryDefault) else tuner.default
    tuner.default = RegistryDefault(tuner, previous, device, resolver, borrow)
    return tuner
