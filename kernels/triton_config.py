"""Launch parameters for any ``@triton.jit`` kernel, served from the registry instead of
autotuned at first call.

Declare the kernel (a :class:`~flyconfigs.registry.KernelDecl` through the
``flyconfigs.kernels`` entry-point group, or :func:`~flyconfigs.registry.register_kernel`),
tune it or install a data package that covers it, then at each call::

    from flyconfigs.kernels.triton_config import TritonConfigs

    configs = TritonConfigs("my_kernel", constants={"block_n": "BLOCK_N"})
    launch = configs({"M": m, "N": n, "dtype": "bf16"}, x.device)
    my_kernel[(triton.cdiv(m, launch.config["rows"]),)](x, y, m, **launch.kwargs)

The config comes through :func:`flyconfigs.resolve`, so it has passed the kernel's
``check_config`` for that key and device (or is the kernel's default), and
``launch.resolution`` says where it came from.  The device is a tensor's
``torch.device``, a GPU ordinal, ``None`` (the current GPU), a
:class:`~flyconfigs.registry.DeviceQuery` or a device spec as ``FLYCONFIGS_DEVICE``
takes it (``"H200"``, ``"sm90:132:NVIDIA H200"``); a CPU tensor (Triton's interpreter)
is served the kernel's default, without touching a GPU runtime.  Triton's launch options
(``num_warps``, ``num_stages``, ``num_ctas``, ``maxnreg``) are passed as options; every
other tunable is passed as the kernel parameter ``constants`` names (its own name by
default).  Imports Triton nowhere: the caller launches.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from flyconfigs.errors import FieldProblem, InvalidDeviceError
from flyconfigs.registry import DeviceQuery, Resolution, default_resolver, resolve
from flyconfigs.registry.plugin import DEVICE_ARGUMENT, KernelDecl, KeyValue, as_query, check_key, default_config, kernel_declaration

__all__ = ["LAUNCH_OPTIONS", "TritonConfigs", "TritonLaunch", "device_query"]

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
"""Config entries that are Triton launch options rather than kernel parameters."""

_DEVICES: dict[int, DeviceQuery] = {}
_LOCK = threading.Lock()


_GPU_TYPES = ("cuda", "hip")
_HOST_TYPES = ("cpu", "meta")


def _torch_type(device: Any) -> tuple[str, int | None] | None:
    """``(type, index)`` of a ``torch.device`` or of a string torch would read as one
    (``"cuda"``, ``"cuda:1"``, ``"cpu"``), else ``None``; never imports torch."""
    if isinstance(device, str):
        name, _, number = device.partition(":")
        if name in _GPU_TYPES + _HOST_TYPES and (not number or number.isdigit()):
            return name, int(number) if number else None
        return None
    kind: Any = getattr(device, "type", None)
    index: Any = getattr(device, "index", 0)
    if isinstance(kind, str) and (index is None or type(index) is int):
        return kind, index
    return None


def device_query(device: Any = None) -> DeviceQuery | None:
    """The registry's query for ``device`` (see the module's summary); ``None`` for a
    CPU or meta device, which has no GPU to resolve for.  A GPU ordinal is read once
    through the GPU layer.  :class:`~flyconfigs.errors.InvalidDeviceError` naming the
    argument for anything else."""
    if isinstance(device, DeviceQuery):
        return device
    torch_device = _torch_type(device) if device is not None else ("cuda", None)
    if torch_device is None and isinstance(device, str):
        return as_query(device, DEVICE_ARGUMENT)
    if torch_device is not None and torch_device[0] in _HOST_TYPES:
        return None
    if torch_device is not None:
        index = torch_device[1]
    elif type(device) is int and device >= 0:
        index = device
    else:
        raise InvalidDeviceError(DEVICE_ARGUMENT, [FieldProblem("", (
            f"expected a torch.device, a GPU ordinal, None, a DeviceQuery or a device spec such as 'H200' or "
            f"'sm90:132:NVIDIA H200', got {type(device).__name__} {device!r}"))])
    if index is None:
        try:
            import torch
        except ImportError:
            # No torch, so no current CUDA device to ask: the registry's own current
            # device (FLYCONFIGS_DEVICE, else its detector), as resolve() takes it.
            return default_resolver().current_device()[0]
        index = torch.cuda.current_device()
    found = _DEVICES.get(index)
    if found is None:
        from flyconfigs.gpu import get_backend

        with _LOCK:
            found = _DEVICES.get(index)
            if found is None:
                found = _DEVICES[index] = DeviceQuery.of(get_backend(ordinal=index).device().identity)
    return found


@dataclass(frozen=True)
class TritonLaunch:
    """A resolved config split for a Triton launch: ``kwargs`` is what to pass."""

    config: Mapping[str, KeyValue]
    constants: dict[str, Any]
    options: dict[str, Any]
    resolution: Resolution
    kwargs: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kwargs", {**self.constants, **self.options})


class TritonConfigs:
    """The registry's configs for one Triton kernel family.

    ``kernel``: its declared name (or declaration).  ``constants``: tunable name → the
    kernel's ``tl.constexpr`` parameter name, for tunables named differently there."""

    def __init__(self, kernel: str | KernelDecl, constants: Mapping[str, str] | None = None) -> None:
        self.kernel = kernel
        self.constants = dict(constants or {})
        self._split: dict[int, TritonLaunch] = {}

    def __call__(self, key: Mapping[str, object], device: Any = None) -> TritonLaunch:
        """The launch parameters for ``key`` on ``device`` (see :func:`device_query`;
        the kernel's default for a CPU tensor).  Raises only for a bad call (unknown
        kernel, bad key, a device it cannot read), never for bad data."""
        query = device_query(device)
        resolution = resolve(self.kernel, key, query) if query is not None else _host_default(self.kernel, key)
        found = self._split.get(id(resolution))
        if found is not None and found.resolution is resolution:
            return found
        constants = {self.constants.get(k, k): v for k, v in resolution.config.items() if k not in LAUNCH_OPTIONS}
        options = {k: v for k, v in resolution.config.items() if k in LAUNCH_OPTIONS}
        launch = TritonLaunch(resolution.config, constants, options, resolution)
        if len(self._split) > 4096:
            self._split.clear()
        self._split[id(resolution)] = launch
        return launch


def _host_default(kernel: str | KernelDecl, key: Mapping[str, object]) -> Resolution:
    """The kernel's default for a tensor on the CPU (Triton's interpreter): no GPU, so no
    tuned config applies; the key is checked as a resolve checks it."""
    problems = default_resolver().problems
    decl = kernel_declaration(kernel, problems)
    norm = check_key(decl, key, problems)
    return Resolution(kernel=decl.name, key=MappingProxyType(dict(norm)), device=None,
                      config=MappingProxyType(default_config(decl, norm, None, problems)), source="default",
                      layer="default", key_match="none",
                      reasons=("the tensors are on the CPU (Triton's interpreter): no GPU to resolve for",
                               "served the kernel's default heuristic"))
