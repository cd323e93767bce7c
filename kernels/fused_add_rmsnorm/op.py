"""``fused_add_rms_norm(x, residual, weight, eps=1e-6, out=None)``: the op users call
(the tuner's workload, :mod:`.workload`, is exported here too).

``residual += x`` in place, then ``out = rms_norm(residual, weight, eps)``.  Each call
resolves its config through the registry (so an installed data package changes what
runs) and launches the implementation it names on the current stream: the Triton
kernel, or the RMSNorm source's fused kernel (compiled through the GPU layer, cached on
disk).  A ``source`` config whose vector accesses the tensors' addresses or row strides
do not allow runs the family's default (a Triton config) for that call instead.  It is the torch
custom op ``flyconfigs::fused_add_rms_norm`` (mutating ``residual`` and ``out``) with a
fake implementation, so it works under ``torch.compile``, and inside CUDA/HIP graph
capture after one eager call at that shape has compiled the variant.

Eager calls have a prepared path, as ``rms_norm`` has: the first call of a layout of
``(x, residual, weight, out)`` checks every input rule, resolves the config and plans its
launch (for a ``source`` config, the loaded kernel at its geometry; for a Triton config,
the kernel the JIT compiled at that first call, launched afterwards through Triton's own
launcher without the JIT's per-call dispatch); later calls of the same layout, with the
registry unchanged since, check only the addresses' alignment (and for a Triton config
that the current GPU is the one it was loaded on) and launch.  After a registry change
(``refresh()``), the first call that plans anew drops every plan and layout of the
registry before.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import torch

from flyconfigs.gpu import get_backend
from flyconfigs.gpu.backend import PreparedLaunch
from flyconfigs.kernels.fused_add_rmsnorm.declaration import SPEC
from flyconfigs.kernels.fused_add_rmsnorm.impls import source_config
from flyconfigs.kernels.fused_add_rmsnorm.workload import (
    FusedAddRMSNormWorkload,
    TritonPrepared,
    aligned,
    launch,
    prepare_triton,
)
from flyconfigs.kernels.rmsnorm.declaration import ELEMENT_BYTES
from flyconfigs.kernels.rmsnorm.declaration import SPEC as RMSNORM
from flyconfigs.kernels.rmsnorm.op import current_stream, kernel_for, on_unload
from flyconfigs.kernels.torch_dtypes import NAME_OF
from flyconfigs.kernels.triton_config import device_query
from flyconfigs.registry import default_resolver, resolve

__all__ = ["FusedAddRMSNormWorkload", "fused_add_rms_norm", "launch"]


def _check(x: Any, residual: Any, weight: Any, out: Any, eps: Any) -> None:
    """Every input rule, before anything touches a device."""
    for name, value in (("x", x), ("residual", residual), ("weight", weight)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"fused_add_rms_norm: {name} must be a torch tensor, got {type(value).__name__}")
    if x.dtype not in NAME_OF:
        raise TypeError(f"fused_add_rms_norm supports bfloat16, float16 and float32 activations, not {x.dtype}")
    if residual.dtype != x.dtype:
        raise TypeError(f"residual must be {x.dtype} like x, got {residual.dtype}")
    if weight.dtype not in (x.dtype, torch.float32):
        raise TypeError(f"weight must be {x.dtype} or float32, got {weight.dtype}")
    if x.dim() < 1 or x.numel() == 0:
        raise ValueError(f"fused_add_rms_norm needs a non-empty tensor with a last dimension, got shape {tuple(x.shape)}")
    if residual.shape != x.shape:
        raise ValueError(f"residual must have the shape of x {tuple(x.shape)}, got {tuple(residual.shape)}")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1] or weight.stride(0) != 1:
        raise ValueError(f"weight must be contiguous with shape ({x.shape[-1]},), got {tuple(weight.shape)}")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch tensor, got {type(out).__name__}")
        if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
            raise ValueError(f"out must match x (shape {tuple(x.shape)}, {x.dtype}, {x.device}); "
                             f"got {tuple(out.shape)}, {out.dtype}, {out.device}")
        if out.data_ptr() in (x.data_ptr(), residual.data_ptr()):
            raise ValueError("out must not be x or residual: the op reads both while it writes out")
    if x.device.type != "cuda":
        raise ValueError(f"fused_add_rms_norm runs on a GPU; x is on {x.device}")
    if residual.device != x.device or weight.device != x.device:
        raise ValueError(f"x, residual and weight must be on one device; got {x.device}, {residual.device}, {weight.device}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")


def _rows(t: torch.Tensor) -> torch.Tensor | None:
    """``t`` as 2-D rows without a copy, or ``None`` when its rows are not evenly strided
    or its columns not contiguous."""
    n = t.shape[-1]
    if t.stride(-1) != 1:
        return None
    if t.dim() == 2:
        return t
    try:
        return t.view(-1, n)
    except RuntimeError:
        return None


@dataclass(frozen=True)
class _Plan:
    """What an eager call of one shape launches: the resolved config and, for a
    ``source`` config, its kernel prepared at the shape's geometry with the alignment its
    vectors ask of the tensors."""

    config: dict[str, Any]
    prepared: PreparedLaunch | None
    vector_bytes: int
    weight_align: int
    generation: int


@dataclass(frozen=True)
class _Layout:
    """A checked layout of ``(x, residual, weight, out)`` whose 2-D views are the tensors
    themselves: its plan, GPU, rows and row strides (the addresses are checked per call),
    and for a Triton config its compiled kernel prepared for direct launches (``None``
    where it could not be)."""

    plan: _Plan
    index: int
    m: int
    sx: int
    sr: int
    sy: int
    triton: TritonPrepared | None = None


_RESOLVER = default_resolver()
_PLANS: dict[tuple[Any, ...], _Plan] = {}
_LAYOUTS: dict[tuple[Any, ...], _Layout] = {}
_MAX_LAYOUTS = 4096
_LOCK = threading.Lock()


def _forget() -> None:
    with _LOCK:
        _PLANS.clear()
        _LAYOUTS.clear()


# A plan holds kernels the RMSNorm op loaded; when it unloads them, the plans go too.
on_unload(_forget)


def _plan(x2: torch.Tensor, weight: torch.Tensor) -> _Plan:
    """The plan of ``x2``'s shape: resolved, and for a ``source`` config compiled, loaded
    and prepared once per registry generation."""
    m, n = x2.shape
    index = x2.get_device()
    dtype, wdtype = NAME_OF[x2.dtype], NAME_OF[weight.dtype]
    ident = (index, m, n, dtype, wdtype)
    plan = _PLANS.get(ident)
    if plan is not None and plan.generation == _RESOLVER.generation:
        return plan
    generation = _RESOLVER.generation
    key = {"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype}
    config = dict(resolve(SPEC, key, device_query(x2.device)).config)
    rest = source_config(config)
    prepared, vb, walign = None, 0, 1
    if rest is not None:
        kernel = kernel_for(get_backend(ordinal=index), rest, key, residual=True)
        prepared = kernel.prepare(*RMSNORM.grid(rest, m))
        vb = int(rest["vector_bytes"])
        walign = min(16, vb // ELEMENT_BYTES[dtype] * weight.element_size()) if vb else 1
    plan = _Plan(config, prepared, vb, walign, generation)
    with _LOCK:
        # The first plan of a newer registry drops every plan and layout of the older
        # ones: none is launched again (the hot path compares generations), and a layout
        # not called since would otherwise keep an old config and its kernel alive.
        for old in [k for k, p in _PLANS.items() if p.generation < generation]:
            del _PLANS[old]
        for old in [k for k, seen in _LAYOUTS.items() if seen.plan.generation < generation]:
            del _LAYOUTS[old]
        _PLANS[ident] = plan
    return plan


def _layout_key(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None) -> tuple[Any, ...]:
    """Everything the input rules and the launch read from the tensors but their
    addresses; ``out`` None stands for the contiguous output the op allocates."""
    head = (x.shape, x.stride(), x.dtype, x.device, residual.shape, residual.stride(), residual.dtype, residual.device,
            weight.shape, weight.stride(), weight.dtype, weight.device)
    if out is None:
        return head
    return (*head, out.shape, out.stride(), out.dtype, out.device)


def _fits(plan: _Plan, xp: int, rp: int, yp: int, wp: int) -> bool:
    """Whether the plan's prepared vector kernel may run on these addresses."""
    vb = plan.vector_bytes
    if not vb:
        return True
    return not (xp % vb or rp % vb or yp % vb or wp % plan.weight_align)


def _run(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> _Layout | None:
    """Launch on checked tensors.  Returns what a later call of the same layout can
    launch without the checks, where x, residual and out were used in place; else ``None``."""
    x2 = _rows(x)
    if x2 is None:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
    r2, y2 = _rows(residual), _rows(out)
    r_staged, y_staged = r2 is None, y2 is None
    if r2 is None:
        r2 = residual.reshape(-1, x.shape[-1]).contiguous()
    if y2 is None:
        y2 = torch.empty(x2.shape, dtype=out.dtype, device=out.device)
    plan = _plan(x2, weight)
    config = plan.config
    prepared, in_place, compiled = plan.prepared, True, None
    if not aligned(config, x2, r2, y2, weight=weight):
        prepared, in_place = None, False
        config = SPEC.default_config(SPEC.check_key(
            {"M": x2.shape[0], "N": x2.shape[1], "dtype": NAME_OF[x.dtype], "weight_dtype": NAME_OF[weight.dtype]}),
            device_query(x.device))
        launch(x2, r2, weight, y2, eps, config)
    elif prepared is not None:
        m = x2.shape[0]
        prepared((x2.data_ptr(), r2.data_ptr(), weight.data_ptr(), y2.data_ptr(), m, x2.stride(0), r2.stride(0),
                       y2.stride(0), eps), current_stream(x2.get_device()))
    else:
        compiled = launch(x2, r2, weight, y2, eps, config)
    if r_staged:
        residual.copy_(r2.view(residual.shape))
    if y_staged:
        out.copy_(y2.view(out.shape))
    if r_staged or y_staged or x2.data_ptr() != x.data_ptr() or not in_place:
        return None
    triton_launch = None
    if prepared is None and compiled is not None:  # a Triton config's kernel, compiled by its first call
        pointers = (x2.data_ptr(), r2.data_ptr(), weight.data_ptr(), y2.data_ptr())
        triton_launch = prepare_triton(compiled, config, x2.shape[1], pointers, torch.cuda.current_device())
    return _Layout(plan, x2.get_device(), x2.shape[0], x2.stride(0), r2.stride(0), y2.stride(0), triton_launch)


@torch.library.custom_op("flyconfigs::fused_add_rms_norm", mutates_args=("residual", "out"))
def _fused_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    _run(x, residual, weight, eps, out)


@_fused_op.register_fake
def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    return None


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                       out: torch.Tensor | None = None) -> torch.Tensor:
    """``residual += x`` (in place), then ``rms_norm(residual, weight, eps)``, returned in
    ``out`` (allocated when ``None``).

    ``x`` and ``residual``: bfloat16, float16 or float32, one shape, on a CUDA/HIP device;
    ``weight``: shape ``(N,)``, the activation dtype or float32.  The sum is rounded to
    the residual's dtype before it is normalized, as the unfused pair does.  Raises
    ``TypeError`` or ``ValueError`` for bad input before anything is launched."""
    # The eager hot path: a layout that passed every input rule before, with a plan
    # still current, launches its prepared kernel; only the addresses are new, and their
    # alignment is checked on every call.
    if not torch.compiler.is_compiling() and eps.__class__ is float and eps >= 0.0 and isinstance(x, torch.Tensor) \
            and isinstance(residual, torch.Tensor) and isinstance(weight, torch.Tensor) \
            and (out is None or isinstance(out, torch.Tensor)):
        seen = _LAYOUTS.get(_layout_key(x, residual, weight, out))
        if seen is not None and seen.plan.generation == _RESOLVER.generation:
            out_ = torch.empty_like(x, memory_format=torch.contiguous_format) if out is None else out
            xp, rp, wp, yp = x.data_ptr(), residual.data_ptr(), weight.data_ptr(), out_.data_ptr()
            plan = seen.plan
            if yp != xp and yp != rp:
                if plan.prepared is None:  # a Triton config
                    direct = seen.triton
                    if direct is not None and direct.fits(xp, rp, wp, yp) \
                            and torch.cuda.current_device() == direct.device:
                        direct((xp, rp, wp, yp, seen.m, seen.sx, seen.sr, seen.sy, eps), current_stream(seen.index))
                        return out_
                    n = x.shape[-1]  # the JIT's launch, on 2-D views
                    launch(x.view(-1, n), residual.view(-1, n), weight, out_.view(-1, n), eps, plan.config)
                    return out_
                if _fits(plan, xp, rp, yp, wp):
                    plan.prepared((xp, rp, wp, yp, seen.m, seen.sx, seen.sr, seen.sy, eps), current_stream(seen.index))
                    return out_
    _check(x, residual, weight, out, eps)
    key = _layout_key(x, residual, weight, out)
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if torch.compiler.is_compiling():
        _fused_op(x, residual, weight, float(eps), out)
        return out
    # Eager calls (graph capture included) skip the dispatcher's host cost.
    layout = _run(x, residual, weight, float(eps), out)
    if layout is not None:
        with _LOCK:
            if len(_LAYOUTS) >= _MAX_LAYOUTS:
                _LAYOUTS.clear()
            _LAYOUTS[key] = layout
    return out
