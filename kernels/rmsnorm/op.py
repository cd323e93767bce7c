"""``rms_norm(x, weight, eps=1e-6, out=None)``: the RMSNorm op users call.

Each call resolves its config through the registry (so an installed data package changes
what runs), compiles it through the GPU layer (cached on disk and in process), and
launches on the tensor's current stream.  It is registered as the torch custom ops
``flyconfigs::rms_norm`` and ``flyconfigs::rms_norm_out`` with fake implementations, so
it works under ``torch.compile`` and inside CUDA/HIP graph capture (after one eager call
has compiled the variant).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from flyconfigs.gpu import get_backend
from flyconfigs.gpu.backend import ArgKind, Backend, CompiledKernel, Kernel, PreparedLaunch
from flyconfigs.kernels.rmsnorm.declaration import ELEMENT_BYTES, SPEC
from flyconfigs.kernels.torch_dtypes import NAME_OF
from flyconfigs.registry import DeviceQuery, default_resolver, resolve

__all__ = ["current_stream", "kernel_for", "on_unload", "rms_norm", "unload_kernels"]

_DTYPES = NAME_OF
_SIGNATURE: tuple[ArgKind, ...] = ("ptr", "ptr", "ptr", "i32", "i64", "i64", "f32")
_RESIDUAL_SIGNATURE: tuple[ArgKind, ...] = ("ptr", "ptr", "ptr", "ptr", "i32", "i64", "i64", "i64", "f32")
_KERNELS: dict[tuple[Any, ...], Kernel] = {}
_UNLOADED: dict[tuple[Any, ...], CompiledKernel] = {}
_DEVICES: dict[int, tuple[Backend, DeviceQuery]] = {}
_LOCK = threading.Lock()
_I32_MAX = 2**31 - 1
_ON_UNLOAD: list[Callable[[], None]] = []


def _device(index: int) -> tuple[Backend, DeviceQuery]:
    found = _DEVICES.get(index)
    if found is None:
        backend = get_backend(ordinal=index)
        found = _DEVICES[index] = (backend, DeviceQuery.of(backend.device().identity))
    return found


def kernel_for(backend: Backend, config: Mapping[str, Any], key: Mapping[str, Any], residual: bool = False) -> Kernel:
    """The loaded kernel for ``config`` at ``key`` (compiled once, cached on disk); with
    ``residual``, the source's fused residual-add kernel (arguments x, residual, weight,
    out, rows, and the three row strides before eps)."""
    ident = (backend.ordinal, residual, key["N"], key["dtype"], key["weight_dtype"], *sorted(config.items()))
    kernel = _KERNELS.get(ident)
    if kernel is None:
        with _LOCK:
            kernel = _KERNELS.get(ident)
            if kernel is None:
                compiled = _UNLOADED.pop(ident, None)
                if compiled is None:
                    compiled = backend.compile(SPEC.request(config, key, backend.device().wave_size, residual))
                signature = _RESIDUAL_SIGNATURE if residual else _SIGNATURE
                kernel = _KERNELS[ident] = backend.load(compiled, signature)
    return kernel


def unload_kernels(keep: Collection[Kernel] = ()) -> int:
    """Unload every variant this process has loaded except those in ``keep`` (by
    identity), and forget every launch planned with them; returns how many it unloaded.

    For the tuner's measuring process: a kernel's launch grows slower as a process loads
    more code objects, by up to 0.2 µs a call on an H100 with a few hundred loaded, and
    more for cluster launches, so candidates are timed with only the ones compared
    loaded, as in a process that serves the op.  A later :func:`kernel_for` or call of
    the op loads what it needs again, from the code kept in memory since a call that
    kept some variants (one that keeps none forgets it).  Not for a process where another
    thread or a captured graph may still launch a variant it unloads."""
    kept = {id(k) for k in keep}
    with _LOCK:
        gone = [ident for ident, kernel in _KERNELS.items() if id(kernel) not in kept]
        if gone:
            _LAYOUTS.clear()
            _PLANS.clear()
            for forget in _ON_UNLOAD:
                forget()
        if not keep:
            _UNLOADED.clear()
        for ident in gone:
            kernel = _KERNELS.pop(ident)
            kernel.backend.unload(kernel)
            if keep:
                _UNLOADED[ident] = kernel.compiled
    return len(gone)


def on_unload(forget: Callable[[], None]) -> None:
    """Call ``forget`` whenever :func:`unload_kernels` unloads a variant: for another op
    that keeps prepared launches of kernels loaded here (the fused add + RMSNorm op)."""
    _ON_UNLOAD.append(forget)


def _check(x: Any, weight: Any, out: Any) -> None:
    """Every input rule, before anything touches a device.  Written for the eager hot
    path: dtypes compared by identity (torch's are singletons), devices by index."""
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError(f"rms_norm takes torch tensors, got x={type(x).__name__}, weight={type(weight).__name__}")
    xdtype, wdtype = x.dtype, weight.dtype
    if xdtype not in _DTYPES:
        raise TypeError(f"rms_norm supports bfloat16, float16 and float32 activations, not {xdtype}")
    if wdtype is not xdtype and wdtype is not torch.float32:
        raise TypeError(f"weight must be {xdtype} or float32, got {wdtype}")
    shape = x.shape
    if not shape or x.numel() == 0:
        raise ValueError(f"rms_norm needs a non-empty tensor with a last dimension, got shape {tuple(shape)}")
    if x.stride(-1) != 1:
        raise ValueError(f"the last dimension of x must be contiguous (stride 1), got stride {x.stride(-1)}")
    if weight.dim() != 1 or weight.shape[0] != shape[-1]:
        raise ValueError(f"weight must have shape ({shape[-1]},), got {tuple(weight.shape)}")
    if weight.stride(0) != 1:
        raise ValueError("weight must be contiguous")
    index = x.get_device()
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch tensor, got {type(out).__name__}")
        if out.shape != shape or out.dtype is not xdtype or out.get_device() != index or out.is_cuda != x.is_cuda:
            raise ValueError(
                f"out must match x (shape {tuple(shape)}, {xdtype}, {x.device}); "
                f"got {tuple(out.shape)}, {out.dtype}, {out.device}"
            )
        if out.stride(-1) != 1:
            raise ValueError("the last dimension of out must be contiguous")
    if not x.is_cuda:
        raise ValueError(f"rms_norm runs on a GPU; x is on {x.device}")
    if not weight.is_cuda or weight.get_device() != index:
        raise ValueError(f"weight is on {weight.device}, x on {x.device}")


@dataclass(frozen=True)
class _Plan:
    """What a call of one shape launches: the resolved kernel, its scalar fallback for
    misaligned tensors, and the launch geometry."""

    launch: PreparedLaunch
    scalar: PreparedLaunch | None
    vector_bytes: int
    weight_align: int
    generation: int


_PLANS: dict[tuple[Any, ...], _Plan] = {}
_RESOLVER = default_resolver()


def _plan(index: int, m: int, n: int, dtype: str, wdtype: str, wbytes: int) -> _Plan:
    ident = (index, m, n, dtype, wdtype)
    plan = _PLANS.get(ident)
    if plan is not None and plan.generation == _RESOLVER.generation:
        return plan
    backend, device = _device(index)
    key = {"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype}
    config = dict(resolve(SPEC, key, device).config)
    if m > _I32_MAX:
        raise ValueError(f"rms_norm takes at most {_I32_MAX} rows, got {m}")
    vb = int(config["vector_bytes"])
    grid, block, shared = SPEC.grid(config, m)
    scalar = kernel_for(backend, {**config, "vector_bytes": 0}, key).prepare(grid, block, shared) if vb else None
    xbytes = ELEMENT_BYTES[dtype]
    plan = _Plan(kernel_for(backend, config, key).prepare(grid, block, shared), scalar, vb,
                 min(16, vb // xbytes * wbytes) if vb else 1, _RESOLVER.generation)
    _PLANS[ident] = plan
    return plan


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream(index: int) -> int:
    """The raw handle of torch's current stream on GPU ``index``."""
    # The raw handle without building a Stream object: a third of the host time of a
    # small call otherwise.
    return int(_RAW_STREAM(index)) if _RAW_STREAM is not None else torch.cuda.current_stream(index).cuda_stream


@dataclass(frozen=True)
class _Layout:
    """What a checked call with one layout of ``(x, weight, out)`` launches: the plan,
    the rows and row strides of the 2-D views, and whether those strides allow the
    plan's vector kernel (the pointers are checked per call)."""

    plan: _Plan
    index: int
    m: int
    sx: int
    sy: int
    strides_vector: bool


_LAYOUTS: dict[tuple[Any, ...], _Layout] = {}
_MAX_LAYOUTS = 4096


def _layout_key(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None) -> tuple[Any, ...]:
    """Everything the input rules and the launch geometry read from the tensors except
    their addresses; ``out`` None stands for the contiguous output the op allocates."""
    if out is None:
        return x.shape, x.stride(), x.dtype, x.device, weight.shape, weight.stride(), weight.dtype, weight.device
    return (x.shape, x.stride(), x.dtype, x.device, weight.shape, weight.stride(), weight.dtype, weight.device,
            out.shape, out.stride(), out.dtype, out.device)


def _launch(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> _Layout | None:
    """Launch on checked tensors.  Returns what a later call with the same layout can
    launch without the checks and the reshapes, where both ``x`` and ``out`` were used in
    place; else ``None``."""
    n = x.shape[-1]
    x2 = x if x.dim() == 2 else x.reshape(-1, n)
    m = x2.shape[0]
    staged = False
    if out.dim() == 2:
        y2 = out
    else:
        try:
            y2 = out.view(-1, n)
        except RuntimeError:  # rows of out not evenly strided: write a staging buffer
            y2, staged = torch.empty((m, n), dtype=out.dtype, device=out.device), True
    index = x.get_device()
    plan = _plan(index, m, n, _DTYPES[x.dtype], _DTYPES[weight.dtype], weight.element_size())
    xp, yp, wp = x2.data_ptr(), y2.data_ptr(), weight.data_ptr()
    sx, sy = x2.stride(0), y2.stride(0)
    vb = plan.vector_bytes
    xb = x2.element_size()
    layout = _Layout(plan, index, m, sx, sy, not vb or not (sx * xb % vb or sy * xb % vb))
    launch = plan.launch
    if vb and (not layout.strides_vector or (xp % vb) or (yp % vb) or (wp % plan.weight_align)):
        launch = plan.scalar  # type: ignore[assignment]
    # Every argument is what the signature declares: pointers and strides from torch,
    # m checked against i32 when the plan was made, eps a float.
    launch((xp, wp, yp, m, sx, sy, eps), current_stream(index))
    if staged:
        out.copy_(y2.view(out.shape))
        return None
    return layout if xp == x.data_ptr() else None  # else reshape copied x


@torch.library.custom_op("flyconfigs::rms_norm", mutates_args=())
def _rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _launch(x, weight, eps, out)
    return out


@_rms_norm_op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("flyconfigs::rms_norm_out", mutates_args=("out",))
def _rms_norm_out_op(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    _launch(x, weight, eps, out)


@_rms_norm_out_op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    return None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x * rsqrt(mean(x**2, -1) + eps) * weight`` on the GPU, fp32 accumulation.

    ``x``: bfloat16, float16 or float32 on a CUDA/HIP device, last dimension contiguous;
    ``weight``: shape ``(N,)``, the same dtype or float32.  Raises ``TypeError`` or
    ``ValueError`` for bad input before anything is launched.  A launch that fails with
    the resolved config raises; it is never masked by another config.
    """
    # The eager hot path: a layout of (x, weight, out) that passed every input rule
    # before, with a plan that is still current, launches without checking again.  Only
    # the addresses are new, and their alignment is checked on every call.
    if not torch.compiler.is_compiling() and eps.__class__ is float and isinstance(x, torch.Tensor) \
            and isinstance(weight, torch.Tensor) and (out is None or isinstance(out, torch.Tensor)):
        seen = _LAYOUTS.get(_layout_key(x, weight, out))
        if seen is not None and eps >= 0.0 and seen.plan.generation == _RESOLVER.generation:
            if out is None:
                out = torch.empty_like(x, memory_format=torch.contiguous_format)
            plan = seen.plan
            xp, wp, yp = x.data_ptr(), weight.data_ptr(), out.data_ptr()
            vb = plan.vector_bytes
            launch = plan.launch
            if vb and (not seen.strides_vector or (xp % vb) or (yp % vb) or (wp % plan.weight_align)):
                launch = plan.scalar  # type: ignore[assignment]
            launch((xp, wp, yp, seen.m, seen.sx, seen.sy, eps), current_stream(seen.index))
            return out
    _check(x, weight, out)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    if torch.compiler.is_compiling():
        if out is None:
            result: torch.Tensor = _rms_norm_op(x, weight, float(eps))
            return result
        _rms_norm_out_op(x, weight, float(eps), out)
        return out
    # Eager calls (graph capture included) launch directly: the custom-op dispatcher
    # costs more host time than the kernel takes at small shapes.
    key = _layout_key(x, weight, out)
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    layout = _launch(x, weight, float(eps), out)
    if layout is not None:
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
    return out
