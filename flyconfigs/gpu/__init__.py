"""flyconfigs.gpu: device detection, runtime compilation, launch and timing.

:func:`get_backend` picks ``cuda`` (cuda-python) or ``hip`` (hip-python) automatically,
or the one ``FLYCONFIGS_BACKEND`` names; both run on one implementation
(:mod:`flyconfigs.gpu.backend`).  Where neither binding is installed, the registry's
detector (:func:`current_identity`) asks torch instead (:mod:`flyconfigs.gpu.torch_device`).
Nothing here is imported by ``import flyconfigs``.
"""

from __future__ import annotations

import os
import threading
from typing import Literal

from flyconfigs.errors import BackendUnavailableError, GPURuntimeMissingError
from flyconfigs.gpu.backend import Backend, Binding, CompiledKernel, CompileRequest, Kernel, LaunchArgumentError
from flyconfigs.schema.models import Device, DeviceIdentity

__all__ = [
    "BACKEND_ENV",
    "Backend",
    "Binding",
    "CompileRequest",
    "CompiledKernel",
    "Kernel",
    "LaunchArgumentError",
    "backend_for_vendor",
    "binding_for",
    "current_identity",
    "detect_device",
    "device_count",
    "get_backend",
]

BACKEND_ENV = "FLYCONFIGS_BACKEND"
_BACKENDS: dict[tuple[str, int, str | None], Backend] = {}
_LOCK = threading.Lock()


def _make(name: str, ordinal: int, arch: str | None) -> Backend:
    return Backend(binding_for(name), ordinal, arch)


def get_backend(name: str | None = None, ordinal: int = 0, arch: str | None = None) -> Backend:
    """The backend ``name`` (default ``FLYCONFIGS_BACKEND``, else the first of cuda and
    hip that has a device) for device ``ordinal``; with ``arch``, a compile-only backend
    that needs no device.  Raises :class:`BackendUnavailableError` saying what is missing."""
    chosen = name or os.environ.get(BACKEND_ENV) or None
    with _LOCK:
        key = (chosen or "auto", ordinal, arch)
        if key in _BACKENDS:
            return _BACKENDS[key]
        if chosen:
            backend = _make(chosen, ordinal, arch)
        else:
            reasons = []
            missing: list[GPURuntimeMissingError] = []
            for candidate in ("cuda", "hip"):
                try:
                    backend = _make(candidate, ordinal, arch)
                    if arch is None:
                        backend.device()
                    break
                except BackendUnavailableError as exc:
                    reasons.append(f"{candidate}: {exc}")
                    if isinstance(exc, GPURuntimeMissingError):
                        missing.append(exc)
            else:
                message = "no GPU backend is usable: " + "; ".join(reasons)
                if len(missing) == len(reasons):  # no runtime at all, not a runtime without a device
                    raise GPURuntimeMissingError(message, extras=[e for exc in missing for e in exc.extras])
                raise BackendUnavailableError(message)
        _BACKENDS[key] = backend
        return backend


def backend_for_vendor(vendor: str) -> Literal["cuda", "hip"]:
    """The backend that runs a ``vendor``'s GPUs: ``hip`` for ``amd``, else ``cuda``."""
    return "hip" if vendor == "amd" else "cuda"


def binding_for(name: str) -> Binding:
    """The vendor binding ``name`` (``cuda`` or ``hip``) without selecting a device."""
    if name == "cuda":
        from flyconfigs.gpu.cuda import CudaBinding

        return CudaBinding()
    if name == "hip":
        from flyconfigs.gpu.hip import HipBinding

        return HipBinding()
    raise BackendUnavailableError(f"unknown backend {name!r}; expected 'cuda' or 'hip'")


def device_count(name: str | None = None) -> int:
    """How many devices the backend ``name`` (default ``FLYCONFIGS_BACKEND``, else cuda) sees."""
    return binding_for(name or os.environ.get(BACKEND_ENV) or "cuda").count()


def current_identity() -> DeviceIdentity:
    """The identity of GPU 0 (the ``flyconfigs.detectors`` entry point the registry
    injects into its resolver); raises when there is none.

    Through the vendor bindings (``flyconfigs[cuda]``, ``flyconfigs[hip]``) first; when
    neither is installed, through torch if it is (``flyconfigs[triton]`` brings torch
    alone).  When nothing can detect, the :class:`GPURuntimeMissingError` says what is
    missing: the bindings, torch, or a GPU torch can see."""
    try:
        return detect_device(0).identity
    except GPURuntimeMissingError as exc:
        from flyconfigs.gpu.torch_device import torch_identity, torch_installed

        if not torch_installed():
            raise GPURuntimeMissingError(f"{exc}; torch, which also detects the GPU, is not installed",
                                         extras=exc.extras) from None
        try:
            return torch_identity(0)
        except BackendUnavailableError as why:
            raise GPURuntimeMissingError(f"{exc}; and {why}", extras=exc.extras) from None


def detect_device(ordinal: int = 0) -> Device:
    """The descriptor of GPU ``ordinal``; :class:`BackendUnavailableError` if none."""
    return get_backend(ordinal=ordinal).device()
