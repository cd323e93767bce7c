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
``launch.resolution`` says where it came from.  Triton's launch options
(``num_warps``, ``num_stages``, ``num_ctas``, ``maxnreg``) are passed as options; every
other tunable is passed as the kernel parameter ``constants`` names (its own name by
default).  Imports Triton nowhere: the caller launches.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flyconfigs.registry import DeviceQuery, Resolution, resolve
from flyconfigs.registry.declarations import KernelDecl, KeyValue

__all__ = ["LAUNCH_OPTIONS", "TritonConfigs", "TritonLaunch", "device_query"]

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
"""Config entries that are Triton launch options rather than kernel parameters."""

_DEVICES: dict[int, DeviceQuery] = {}
_LOCK = threading.Lock()


def device_query(device: Any = None) -> DeviceQuery:
    """The registry's query for a torch device (a ``torch.device``, a CUDA/HIP ordinal,
    or ``None`` for the current one), read once per ordinal through the GPU layer."""
    if isinstance(device, DeviceQuery):
        return device
    if device is None or getattr(device, "index", 0) is None:
        import torch

        index = torch.cuda.current_device()
    else:
        index = device if isinstance(device, int) else int(device.index)
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
        """The launch parameters for ``key`` on ``device`` (see :func:`device_query`).
        Raises only for a bad call (unknown kernel, bad key), never for bad data."""
        resolution = resolve(self.kernel, key, device_query(device))
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
