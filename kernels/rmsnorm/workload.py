"""RMSNorm's workload for the tuner (a :class:`~flyconfigs.kernels.plugin.Workload`):
rotated inputs, a launch per config, the check against the float64 reference (an
:class:`~flyconfigs.kernels.output_check.OutputCheck`), and each variant's resources.
Imports torch; the tuner's worker process uses it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from flyconfigs.gpu.backend import Backend
from flyconfigs.kernels.output_check import OutputCheck
from flyconfigs.kernels.plugin import Workload
from flyconfigs.kernels.rmsnorm.declaration import SPEC, RMSNormSpec, reference_rms_norm, traffic_bytes
from flyconfigs.kernels.rmsnorm.op import kernel_for, unload_kernels
from flyconfigs.kernels.torch_dtypes import TORCH_DTYPES
from flyconfigs.schema.models import Resources

__all__ = ["RMSNormWorkload"]

DT = TORCH_DTYPES
EPS = 1e-6


class RMSNormWorkload(Workload):
    """Inputs for one key: ``copies`` rotated activations and outputs, one weight."""

    def __init__(self, key: Mapping[str, Any], copies: int, backend: Backend, spec: RMSNormSpec = SPEC, seed: int = 0) -> None:
        self.key = dict(key)
        self.spec = spec
        self.backend = backend
        m, n = int(key["M"]), int(key["N"])
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.xs = [(torch.randn(m, n, device="cuda", generator=g) * 2).to(DT[key["dtype"]]) for _ in range(copies)]
        self.ys = [torch.empty_like(x) for x in self.xs]
        self.w = (torch.rand(n, device="cuda", generator=g) + 0.5).to(DT[key["weight_dtype"]])
        x0, w = self.xs[0], self.w
        self.output_check = OutputCheck((m, n), lambda a, b: reference_rms_norm(x0[a:b], w, EPS), key["dtype"])
        self.bytes = traffic_bytes(m, n, key["dtype"], key["weight_dtype"])

    @property
    def copies(self) -> int:
        """How many rotated input sets there are."""
        return len(self.xs)

    def resources(self, config: Mapping[str, Any]) -> Resources:
        """What ``config``'s compiled variant uses, at its block size."""
        kernel = kernel_for(self.backend, config, self.key)
        block = int(config["threads"]) * int(config["rows_per_block"])
        return self.backend.resources(kernel.compiled, block, kernel)

    def launcher(self, config: Mapping[str, Any]) -> Callable[[int], None]:
        """``run(i)``: one call of ``config`` on rotated copy ``i``, on the current stream."""
        kernel = kernel_for(self.backend, config, self.key)
        m, n = int(self.key["M"]), int(self.key["N"])
        grid, block, shared = self.spec.grid(config, m)
        xs, ys, w = self.xs, self.ys, self.w

        def run(i: int) -> None:
            kernel.launch(grid, block, (xs[i], w, ys[i], m, n, n, EPS), torch.cuda.current_stream().cuda_stream, shared)

        return run

    def release(self, keep: Sequence[Mapping[str, Any]]) -> int:
        """Unload every variant the process has loaded except ``keep``'s at this key (see
        :func:`~flyconfigs.kernels.rmsnorm.op.unload_kernels`); returns how many."""
        return unload_kernels([kernel_for(self.backend, c, self.key) for c in keep])

    def check(self, config: Mapping[str, Any]) -> str | None:
        """Run ``config`` once on poisoned output; ``None`` if it matches the reference,
        else what is wrong."""
        self.ys[0].fill_(float("nan"))
        self.launcher(config)(0)
        torch.cuda.synchronize()
        return self.output_check.mismatch(self.ys[0])
