"""The fused add + RMSNorm workload for the tuner (a
:class:`~flyconfigs.kernels.plugin.Workload`) and the launch of one config of either
implementation, which the op shares.  Imports torch and Triton, and neither the
declaration nor the op: the declaration imports this module when the tuner asks it for a
workload."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import triton

from flyconfigs.gpu import get_backend
from flyconfigs.gpu.backend import Backend
from flyconfigs.kernels.fused_add_rmsnorm.impls import source_config, tail_of
from flyconfigs.kernels.fused_add_rmsnorm.kernel import fused_add_rmsnorm_kernel
from flyconfigs.kernels.fused_add_rmsnorm.reference import reference_fused_add_rms_norm
from flyconfigs.kernels.output_check import OutputCheck
from flyconfigs.kernels.plugin import Workload
from flyconfigs.kernels.rmsnorm.declaration import SPEC as RMSNORM
from flyconfigs.kernels.rmsnorm.op import kernel_for, unload_kernels
from flyconfigs.kernels.torch_dtypes import NAME_OF as _NAME
from flyconfigs.kernels.torch_dtypes import TORCH_DTYPES
from flyconfigs.kernels.triton_workload import compiled_resources, launch_errors
from flyconfigs.registry.plugin import KernelDecl
from flyconfigs.schema.models import Resources

__all__ = ["EPS", "FusedAddRMSNormWorkload", "TritonPrepared", "aligned", "launch", "prepare_triton", "triton_arguments"]

EPS = 1e-6


def _planned(backend: Backend, rest: Mapping[str, Any], key: Mapping[str, Any]) -> tuple[Any, Any, Any, int]:
    """The loaded fused kernel of the RMSNorm-source config ``rest`` at ``key`` (compiled
    once, cached) and its grid, block and shared bytes for ``key``'s rows."""
    return (kernel_for(backend, rest, key, residual=True), *RMSNORM.grid(rest, int(key["M"])))


def aligned(config: Mapping[str, Any], *tensors: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether 2-D ``tensors`` (base pointers and row strides) and ``weight`` meet the
    alignment a ``source`` config's vector accesses need (always true for a Triton config
    or a scalar one), as the RMSNorm op checks its own."""
    rest = source_config(config)
    vb = int(rest["vector_bytes"]) if rest is not None else 0
    if not vb:
        return True
    xbytes = tensors[0].element_size()
    if any(t.data_ptr() % vb or t.stride(0) * xbytes % vb for t in tensors):
        return False
    return weight.data_ptr() % min(16, vb // xbytes * weight.element_size()) == 0


def launch(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float,
           config: Mapping[str, Any], backend: Backend | None = None) -> Any:
    """Launch ``config`` on 2-D ``x``, ``residual`` and ``out`` (rows of stride ``stride(0)``,
    columns contiguous) on torch's current stream: Triton's compiled kernel, or for a
    ``source`` config the RMSNorm source's fused kernel through ``backend`` (the GPU
    layer of ``x``'s device when ``None``), whose vector accesses the caller has checked
    with :func:`aligned`."""
    m, n = x.shape
    rest = source_config(config)
    if rest is not None:
        backend = backend or get_backend(ordinal=x.device.index)
        key = {"M": m, "N": n, "dtype": _NAME[x.dtype], "weight_dtype": _NAME[weight.dtype]}
        kernel, grid, threads, shared = _planned(backend, rest, key)
        kernel.launch(grid, threads, (x, residual, weight, out, m, x.stride(0), residual.stride(0), out.stride(0), eps),
                      torch.cuda.current_stream(x.device).cuda_stream, shared)
        return kernel
    rows = int(config["rows_per_program"])
    return fused_add_rmsnorm_kernel[(triton.cdiv(m, rows),)](
        x, residual, weight, out, m, x.stride(0), residual.stride(0), out.stride(0), eps, **triton_arguments(config, n),
    )


def triton_arguments(config: Mapping[str, Any], n: int) -> dict[str, Any]:
    """The Triton kernel's compile-time arguments and launch options for ``config`` at a
    row of ``n`` columns (the tunables a config written before them leaves out take
    their defaults: no tail, no hints, the weight loaded late)."""
    block, stages = int(config["block_n"]), int(config["num_stages"])
    return {"N": n, "BLOCK_N": block, "ROWS": int(config["rows_per_program"]), "STAGES": stages,
            "TAIL": tail_of(config, n), "HINTS": int(config.get("eviction", "none") == "stream"),
            "W_EARLY": int(config.get("weight_load", "late") == "early"),
            "num_warps": int(config["num_warps"]), "num_stages": stages}



_RUNTIME_KNOBS: Any = getattr(getattr(triton, "knobs", None), "runtime", None)
"""Where Triton keeps the launch hooks (a profiler's) since ``triton.knobs``; before, on
``CompiledKernel``."""
_TRITON_VERSION = tuple(int(p) for p in triton.__version__.split(".")[:2] if p.isdigit())


def _hooks(compiled: Any) -> tuple[Any, Any]:
    source = _RUNTIME_KNOBS if _RUNTIME_KNOBS is not None else compiled
    return getattr(source, "launch_enter_hook", None), getattr(source, "launch_exit_hook", None)


class TritonPrepared:
    """A Triton config's compiled kernel prepared for one layout of the op's tensors: a
    call launches it through Triton's own launcher (``CompiledKernel.run``, as the JIT
    does after its dispatch), without the JIT's per-call binding, specialization and
    cache look-up.

    The compiled variant holds what the JIT specialized on at its first launch: the row
    strides (fixed by the layout) and which of the four pointers were 16-byte aligned;
    :meth:`fits` says whether new addresses keep that, and a call that does not fit
    must go through the JIT (:func:`launch`).  Made only by :func:`prepare_triton`."""

    __slots__ = ("_aligned", "_compiled", "_constants", "_device", "_function", "_packed", "_rows", "_run")

    def __init__(self, compiled: Any, rows_per_program: int, constants: tuple[Any, ...],
                 pointers: tuple[int, int, int, int], device: int) -> None:
        self._compiled = compiled
        self._run = compiled.run
        self._function = compiled.function
        self._packed = compiled.packed_metadata
        self._rows = rows_per_program
        self._constants = constants
        self._aligned = tuple(p % 16 == 0 for p in pointers)
        self._device = device

    @property
    def device(self) -> int:
        """The GPU the kernel was loaded on (the current one at its first launch)."""
        return self._device

    def fits(self, xp: int, rp: int, wp: int, yp: int) -> bool:
        """Whether the kernel, specialized on the first launch's pointers, may run on these:
        every pointer that was 16-byte aligned then is now."""
        ax, ar, aw, ay = self._aligned
        return not ((ax and xp % 16) or (ar and rp % 16) or (aw and wp % 16) or (ay and yp % 16))

    def __call__(self, args: tuple[int, int, int, int, int, int, int, int, float], stream: int) -> None:
        """Launch on ``(x, residual, weight, y, M, stride_x, stride_r, stride_y, eps)``
        (pointers as ints) on the raw ``stream``; the caller checked :meth:`fits`."""
        grid = (-(-args[4] // self._rows), 1, 1)
        full = (*args, *self._constants)
        enter, leave = _hooks(self._compiled)
        # As the JIT does: the metadata a profiler's hook reads (None without one).
        meta = self._compiled.launch_metadata(grid, stream, *full)
        self._run(grid[0], 1, 1, stream, self._function, self._packed, meta, enter, leave, *full)


def prepare_triton(compiled: Any, config: Mapping[str, Any], n: int, pointers: tuple[int, int, int, int],
                   device: int) -> TritonPrepared | None:
    """``compiled`` (what the JIT's launch of the Triton ``config`` at rows of ``n``
    returned) prepared for direct launches, or ``None`` where that cannot be done
    safely: no compiled kernel (Triton's interpreter), a Triton before 3.3 (whose
    launcher takes the arguments without the compile-time ones) or one whose compiled
    kernel lacks the launcher this relies on."""
    if _TRITON_VERSION < (3, 3) or compiled is None:
        return None
    if not all(hasattr(compiled, name) for name in ("run", "function", "packed_metadata", "launch_metadata")):
        return None
    args = triton_arguments(config, n)
    constants = tuple(args[name] for name in ("N", "BLOCK_N", "ROWS", "STAGES", "TAIL", "HINTS", "W_EARLY"))
    return TritonPrepared(compiled, int(config["rows_per_program"]), constants, pointers, device)


class FusedAddRMSNormWorkload(Workload):
    """The tuner's inputs for one key (a :class:`~flyconfigs.kernels.plugin.Workload`):
    ``copies`` rotated sets of x, residual and output, and one weight.  Each timed call
    adds into its residual again, which keeps the traffic and values in range (the
    residuals are re-drawn before each check)."""

    def __init__(self, key: Mapping[str, Any], copies: int, spec: KernelDecl | None = None, seed: int = 0,
                 backend: Backend | None = None) -> None:
        self.key = dict(key)
        self.spec = spec
        self.backend = backend or get_backend()
        m, n = int(key["M"]), int(key["N"])
        dt = TORCH_DTYPES[str(key["dtype"])]
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.xs = [(torch.randn(m, n, device="cuda", generator=g) * 1e-3).to(dt) for _ in range(copies)]
        self.rs = [torch.randn(m, n, device="cuda", generator=g).to(dt) for _ in range(copies)]
        self.ys = [torch.empty_like(x) for x in self.xs]
        self.w = (torch.rand(n, device="cuda", generator=g) + 0.5).to(TORCH_DTYPES[str(key["weight_dtype"])])
        self._fresh = self.rs[0].clone()
        self._expected_r, expected_y = reference_fused_add_rms_norm(self.xs[0], self._fresh, self.w, EPS)
        self._output_check = OutputCheck.of(expected_y, str(key["dtype"]))
        self._compiled: dict[str, Any] = {}

    @property
    def copies(self) -> int:
        return len(self.xs)

    def launcher(self, config: Mapping[str, Any]) -> Callable[[int], None]:
        xs, rs, ys, w = self.xs, self.rs, self.ys, self.w
        cfg = dict(config)

        rest = source_config(cfg)
        if rest is not None:
            # Compiled and planned once, here: the timed call is the launch alone.
            m, n = xs[0].shape
            kernel, grid, threads, shared = _planned(self.backend, rest, self.key)

            def run_source(i: int) -> None:
                kernel.launch(grid, threads, (xs[i], rs[i], w, ys[i], m, n, n, n, EPS),
                              torch.cuda.current_stream().cuda_stream, shared)

            return run_source

        def run(i: int) -> None:
            launch(xs[i], rs[i], w, ys[i], EPS, cfg)

        return run

    def check(self, config: Mapping[str, Any]) -> str | None:
        """Run ``config`` once on a fresh residual and poisoned output; ``None`` if the
        residual and output match the reference, else what is wrong."""
        self.rs[0].copy_(self._fresh)
        self.ys[0].fill_(float("nan"))
        with launch_errors():
            compiled = launch(self.xs[0], self.rs[0], self.w, self.ys[0], EPS, config, self.backend)
            torch.cuda.synchronize()
        self._compiled[repr(sorted(config.items()))] = compiled
        if not torch.equal(self.rs[0], self._expected_r):
            bad = int((self.rs[0] != self._expected_r).sum())
            return f"{bad} residual values differ from x + residual"
        return self._output_check.mismatch(self.ys[0])

    def resources(self, config: Mapping[str, Any]) -> Resources | None:
        """Registers, spills and shared memory of the compiled variant: what Triton
        reports, or for a ``source`` config what the GPU layer reads from its code."""
        rest = source_config(config)
        if rest is not None:
            kernel = kernel_for(self.backend, rest, self.key, residual=True)
            block = int(rest["threads"]) * int(rest["rows_per_block"])
            return self.backend.resources(kernel.compiled, block, kernel)
        return compiled_resources(self._compiled.get(repr(sorted(config.items()))))

    def release(self, keep: Sequence[Mapping[str, Any]]) -> int:
        """Unload every source variant the process has loaded except ``keep``'s (see
        :func:`~flyconfigs.kernels.rmsnorm.op.unload_kernels`); Triton keeps its own."""
        kept = [kernel_for(self.backend, rest, self.key, residual=True)
                for rest in (source_config(c) for c in keep) if rest is not None]
        return unload_kernels(kept)
