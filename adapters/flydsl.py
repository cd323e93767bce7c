"""FlyDSL's ``Autotuner`` served from installed flyconfigs packages.

FlyDSL resolves a call's config in this order: its in-process and on-disk cache, its
offline config folder (``FLYDSL_AUTOTUNE_CONFIG_DIR``), the tuner's ``default`` hook, and
else a search (always a search under ``FLYDSL_AUTOTUNE=1``).  :func:`serve` installs a
``default`` hook that asks the registry first, by FlyDSL's own identity of the call: the
kernel's ``artifact_name``, its ``key`` parameters as FlyDSL records them (a tensor's
shape as a list, a dtype as its string) and the current device.  That is the identity
``flyconfigs import flydsl`` keeps, so FlyDSL's offline configs, once published, are
served from ``pip install``-ed data packages.  When the registry has nothing for the call
(or only a config the kernel's signature cannot take), the hook falls through to what
FlyDSL would have done: the tuner's own ``default``, else its search.

Only the hook's registry lookup is flyconfigs'; caching, searching and launching stay
FlyDSL's.  ``flydsl`` is imported when the hook first builds a config for it.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from flyconfigs.errors import ConfigurationError, FlyconfigsError, InvalidKeyError
from flyconfigs.registry import default_resolver, kernel_declaration
from flyconfigs.registry.declarations import KernelDecl, KeyAxis, KeyValue
from flyconfigs.registry.device import DeviceQuery
from flyconfigs.registry.resolve import Resolution, Resolver
from flyconfigs.schema.models import DeviceIdentity

__all__ = ["FlyDSLKernel", "RegistryDefault", "flydsl_key", "serve"]

logger = logging.getLogger(__name__)

_COMPILER_OPTIONS = ("num_warps", "waves_per_eu")
"""What a FlyDSL ``Config`` takes besides the kernel's own parameters."""


def _signature(fn: Any) -> inspect.Signature:
    # FlyDSL reads the signature of a @jit function's wrapped ``func``, else of the callable.
    return inspect.signature(fn.func if hasattr(fn, "func") else fn)


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
        value = bound.arguments[name]
        if hasattr(value, "shape"):
            value = list(value.shape)
        elif hasattr(value, "dtype"):
            value = str(value.dtype)
        out[name] = value
    try:
        # FlyDSL hashes the key's JSON: a tuple is a list there, and NaN has no JSON.
        return dict(json.loads(json.dumps(out, allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise InvalidKeyError(f"a key value is not JSON: {exc}") from None


class FlyDSLKernel(KernelDecl):
    """A declaration of a FlyDSL kernel that no package declares, made from its
    signature: the key is its ``key`` parameters (JSON values, matched exactly, as FlyDSL
    matches them), and a config names parameters of the kernel (or FlyDSL's
    ``num_warps`` and ``waves_per_eu``), never a key parameter, with values of the types
    their annotations state."""

    name: str
    version = 1
    key_axes: tuple[KeyAxis, ...]

    def __init__(self, name: str, key: tuple[str, ...], signature: inspect.Signature) -> None:
        self.name = name
        self.key = key
        self.signature = signature
        self.key_axes = tuple(KeyAxis(axis, object) for axis in key)

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` with exactly the kernel's key parameters, in order."""
        if sorted(key) != sorted(self.key):
            raise InvalidKeyError(f"key for {self.name!r} must name exactly {', '.join(self.key)}, got {', '.join(key)}")
        return {axis: key[axis] for axis in self.key}

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
        """Why the kernel cannot take ``config`` (as FlyDSL's loader checks it), or ``None``."""
        params = self.signature.parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for name, value in config.items():
            if name in self.key:
                return f"{name} is a key parameter; a config cannot set it"
            if name == "pre_hook":
                return "a stored config cannot hold a pre_hook"
            if name == "waves_per_eu" and type(value) is not int:
                return f"waves_per_eu={value!r} is not an int"
            parameter = params.get(name)
            if parameter is None:
                if name not in _COMPILER_OPTIONS and not takes_any:
                    return f"{name} is not a parameter of the kernel"
                continue
            annotation = parameter.annotation
            if annotation in (bool, int, float, str) and type(value) is not annotation:
                return f"{name}={value!r} is not {annotation.__name__}, as the kernel's annotation says"
        return None

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The empty config: with nothing installed, FlyDSL's own order decides."""
        return {}


class RegistryDefault:
    """The ``default`` hook :func:`serve` installs on a FlyDSL ``Autotuner``: the registry's
    config for the call, else the tuner's previous ``default``, else FlyDSL's search.
    Never raises for what the registry holds; whatever FlyDSL's own fallback raises, it
    raises.  ``last`` is the latest resolution, for inspection."""

    def __init__(self, tuner: Any, fallback: Callable[..., Any] | None, device: DeviceIdentity | DeviceQuery | str | None,
                 resolver: Resolver | None) -> None:
        self.tuner = tuner
        self.fallback = fallback
        self.device = device
        self.resolver = resolver
        self.signature = _signature(tuner.fn)
        self.key = tuple(tuner.key)
        self.last: Resolution | None = None
        self._warned: set[str] = set()
        self.declaration: KernelDecl = self._declaration(str(tuner.artifact_name))

    def _declaration(self, name: str) -> KernelDecl:
        try:
            return kernel_declaration(name)
        except FlyconfigsError:
            return FlyDSLKernel(name, self.key, self.signature)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        config = self._from_registry(args, kwargs)
        if config is not None:
            return config
        if self.fallback is not None:
            return self.fallback(*args, **kwargs)
        # FlyDSL's own order without this hook is a search: run it (FlyDSL caches its
        # winner, so later calls of this key never reach the hook again).
        self.tuner.default = None
        try:
            return self.tuner.resolve_config(*args, **kwargs)
        finally:
            self.tuner.default = self

    def _from_registry(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        try:
            key = flydsl_key(self.signature, self.key, args, kwargs)
            resolver = self.resolver or default_resolver()
            self.last = resolution = resolver.resolve(self.declaration, key, self.device)
        except FlyconfigsError as exc:
            self._warn(f"{self.declaration.name}: not served from the registry ({exc}); FlyDSL's own order decides")
            return None
        if resolution.source == "default":
            return None
        config = dict(resolution.config)
        why = self._binds(config, args, kwargs)
        if why is not None:
            self._warn(f"{self.declaration.name}: {resolution.file} not served: {why}; FlyDSL's own order decides")
            return None
        from flydsl.autotune import Config

        return Config.from_dict(config)

    def _binds(self, config: Mapping[str, Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
        """Why ``config`` cannot complete this call (FlyDSL would refuse it), or ``None``."""
        injected = {k: v for k, v in config.items() if k != "waves_per_eu"}
        try:
            called = self.signature.bind_partial(*args, **kwargs).arguments
        except TypeError as exc:
            return f"the call does not bind ({exc})"
        overlap = sorted(set(injected) & set(called))
        if overlap:
            return f"it would override the call's {', '.join(overlap)}"
        try:
            self.signature.bind(*args, **{**kwargs, **injected})
        except TypeError as exc:
            return f"it does not complete the kernel's signature ({exc})"
        return None

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            logger.warning(message)


def serve(tuner: Any, *, device: DeviceIdentity | DeviceQuery | str | None = None,
          resolver: Resolver | None = None) -> Any:
    """Make the FlyDSL ``Autotuner`` ``tuner`` ask the registry before its own ``default``
    and search; returns ``tuner`` (so it also works as a decorator above ``@autotune``).

    ``tuner`` must have an ``artifact_name`` (the name its artifacts are published under).
    ``device`` is the device to serve (default: the current one, as
    :func:`flyconfigs.resolve` detects it or ``FLYCONFIGS_DEVICE`` gives it).  Raises
    :class:`~flyconfigs.errors.ConfigurationError` for a tuner without an ``artifact_name``."""
    if getattr(tuner, "artifact_name", None) is None:
        raise ConfigurationError("serve() needs a FlyDSL Autotuner with an artifact_name: it is the kernel's name in the registry")
    previous = tuner.default.fallback if isinstance(tuner.default, RegistryDefault) else tuner.default
    tuner.default = RegistryDefault(tuner, previous, device, resolver)
    return tuner
