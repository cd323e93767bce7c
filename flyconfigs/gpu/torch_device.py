"""The GPU's identity as torch reports it, for a process that has torch but not the
vendor's Python bindings (``pip install 'flyconfigs[triton]'`` brings torch and Triton,
not ``cuda-bindings`` or ``hip-python``).

Only the identity the registry matches on (vendor, arch, product, compute units and, on
AMD, the target features) is read: ``torch.cuda.get_device_properties`` gives the
product and the multiprocessor count, ``major.minor`` the NVIDIA arch, and on a ROCm
build of torch (``torch.version.hip``) ``gcnArchName`` the AMD arch and its features
(``gfx942:sramecc+:xnack-``), as hip-python reports them.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from flyconfigs.errors import BackendUnavailableError
from flyconfigs.schema.models import DeviceIdentity

__all__ = ["identity_from_properties", "torch_identity", "torch_installed"]


def torch_installed() -> bool:
    """Whether torch can be imported (found, not imported)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def identity_from_properties(props: Any, product: str, hip: bool) -> DeviceIdentity:
    """An identity from ``torch.cuda.get_device_properties`` (``hip``: a ROCm build)."""
    if hip:
        arch, *features = str(props.gcnArchName).split(":")
        return DeviceIdentity(vendor="amd", arch=arch, product=product.strip() or arch,
                              compute_units=int(props.multi_processor_count), features=sorted(set(features)))
    return DeviceIdentity(vendor="nvidia", arch=f"sm{int(props.major)}{int(props.minor)}", product=product.strip(),
                          compute_units=int(props.multi_processor_count))


def torch_identity(ordinal: int = 0) -> DeviceIdentity:
    """The identity of GPU ``ordinal`` as torch sees it (imports torch);
    :class:`BackendUnavailableError` saying why when torch sees none."""
    try:
        import torch
    except ImportError as exc:
        raise BackendUnavailableError(f"torch is not importable ({exc})") from None
    hip = getattr(torch.version, "hip", None) is not None
    if not torch.cuda.is_available():
        build = f"ROCm {torch.version.hip}" if hip else (f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only")
        raise BackendUnavailableError(f"torch {torch.__version__} ({build} build) sees no GPU")
    if ordinal >= torch.cuda.device_count():
        raise BackendUnavailableError(f"torch sees {torch.cuda.device_count()} GPUs, not GPU {ordinal}")
    try:
        return identity_from_properties(torch.cuda.get_device_properties(ordinal), torch.cuda.get_device_name(ordinal), hip)
    except (AttributeError, ValueError, RuntimeError) as exc:
        raise BackendUnavailableError(f"torch cannot describe GPU {ordinal} ({type(exc).__name__}: {exc})") from None
