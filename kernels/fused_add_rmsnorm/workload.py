"""The fused add + RMSNorm workload for the tuner (a
:class:`~flyconfigs.kernels.plugin.Workload`) and the launch of one config, which the op
shares.  Imports torch and Triton, and neither the declaration nor the op: the
declaration imports this module when the tuner asks it for a workload."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import triton

from flyconfigs.kernels.fused_add_rmsnorm.kernel import fused_add_rmsnorm_kernel
from flyconfigs.kernels.fused_add_rmsnorm.reference import reference_fused_add_rms_norm
from flyconfigs.kernels.output_check import OutputCheck
from flyconfigs.kernels.plugin import Workload
from flyconfigs.kernels.torch_dtypes import TORCH_DTYPES
from flyconfigs.kernels.triton_workload import compiled_resources, launch_errors
from flyconfigs.registry.declarations import KernelDecl
from flyconfigs.schema.models import Resources

__all__ = ["EPS", "FusedAddRMSNormWorkload", "launch"]

EPS = 1e-6


def launch(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float,
           config: Mapping[str, Any]) -> Any:
    """Launch ``config`` on 2-D ``x``, ``residual`` and ``out`` (rows of stride ``stride(0)``,
    columns contiguous); Triton's compiled kernel."""
    m, n = x.shape
    rows, block = int(config["rows_per_program"]), int(config["block_n"])
    stages = int(config["num_stages"])
    return fused_add_rmsnorm_kernel[(triton.cdiv(m, rows),)](
        x, residual, weight, out, m, x.stride(0), residual.stride(0), out.stride(0), eps,
        N=n, BLOCK_N=block, ROWS=rows, STAGES=stages, num_warps=int(config["num_warps"]), num_stages=stages,
    )



class FusedAddRMSNormWorkload(Workload):
    """The tuner's inputs for one key (a :class:`~flyconfigs.kernels.plugin.Workload`):
    ``copies`` rotated sets of x, residual and output, and one weight.  Each timed call
    adds into its residual again, which keeps the traffic and values in range (the
    residuals are re-drawn before each check)."""

    def __init__(self, key: Mapping[str, Any], copies: int, spec: KernelDecl | None = None, seed: int = 0) -> None:
        self.key = dict(key)
        self.spec = spec
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

        def run(i: int) -> None:
            launch(xs[i], rs[i], w, ys[i], EPS, cfg)

        return run

    def check(self, config: Mapping[str, Any]) -> str | None:
        """Run ``config`` once on a fresh residual and poisoned output; ``None`` if the
        residual and output match the reference, else what is wrong."""
        self.rs[0].copy_(self._fresh)
        self.ys[0].fill_(float("nan"))
        with launch_errors():
            compiled = launch(self.xs[0], self.rs[0], self.w, self.ys[0], EPS, config)
            torch.cuda.synchronize()
        self._compiled[repr(sorted(config.items()))] = compiled
        if not torch.equal(self.rs[0], self._expected_r):
            bad = int((self.rs[0] != self._expected_r).sum())
            return f"{bad} residual values differ from x + residual"
        return self._output_check.mismatch(self.ys[0])

    def resources(self, config: Mapping[str, Any]) -> Resources | None:
        """Registers, spills and shared memory Triton reports for the compiled variant."""
        return compiled_resources(self._compiled.get(repr(sorted(config.items()))))
