"""The measurer that runs in the worker process on a real GPU (CUDA or HIP backend).

It owns the GPU context: it checks each candidate against the reference, reads its
resource usage and times candidates with the protocol of :mod:`flyconfigs.tuner.timing`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flyconfigs.errors import GPUError

__all__ = ["GPUMeasurer"]


class GPUMeasurer:
    """Worker-side measurer; built in the child by :class:`~flyconfigs.tuner.worker.Worker`."""

    def __init__(self, backend: str | None = None, ordinal: int = 0, kernel: str = "rmsnorm") -> None:
        from flyconfigs.errors import BackendUnavailableError
        from flyconfigs.gpu import get_backend

        self.backend = get_backend(backend, ordinal)
        self.backend.device()
        import torch

        if not torch.cuda.is_available():
            raise BackendUnavailableError("torch sees no GPU; the tuner needs torch with CUDA or ROCm")
        torch.cuda.set_device(ordinal)
        self.backend.activate()
        self.kernel = kernel
        self._workload: Any = None
        self._key: dict[str, Any] | None = None

    def device(self) -> dict[str, Any]:
        return self.backend.device().model_dump(mode="json")

    def prepare(self, key: Mapping[str, Any], copies: int) -> None:
        """Allocate ``copies`` rotated inputs for ``key`` (frees the previous key's)."""
        import torch

        from flyconfigs.kernels.rmsnorm_workload import RMSNormWorkload

        self._workload = None
        torch.cuda.empty_cache()
        self._workload = RMSNormWorkload(key, copies, self.backend)
        self._key = dict(key)

    def check(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Verify one candidate; its status, message and resources."""
        from flyconfigs.errors import CompileError

        try:
            wrong = self._verify(config)
        except CompileError as exc:
            return {"status": "compile_error", "message": str(exc)[:4000], "resources": None}
        except GPUError as exc:
            return {"status": "launch_error", "message": str(exc)[:4000], "resources": None, "fault": True}
        resources = self._resources(config)
        if wrong:
            return {"status": "wrong_result", "message": wrong, "resources": resources}
        return {"status": "ok", "message": None, "resources": resources}

    def _verify(self, config: Mapping[str, Any]) -> str | None:
        """Run ``config`` once against the reference; what is wrong, or ``None``."""
        wrong: str | None = self._workload.check(config)
        return wrong

    def _resources(self, config: Mapping[str, Any]) -> dict[str, Any] | None:
        from flyconfigs.kernels.rmsnorm_op import kernel_for

        kernel = kernel_for(self.backend, config, self._key or {})
        block = int(config["threads"]) * int(config["rows_per_block"])
        return self.backend.resources(kernel.compiled, block, kernel).model_dump(mode="json")

    def time(self, configs: list[Mapping[str, Any]], launches: int, samples: int, warmup: int) -> list[list[float]]:
        """Per-call microsecond samples of each config, interleaved."""
        from flyconfigs.tuner.timing import TimingPlan, measure

        copies = len(self._workload.xs)
        plan = TimingPlan(copies=copies, launches=launches, warmup=warmup, samples=samples)
        return [list(m.samples_us) for m in measure([self._workload.launcher(c) for c in configs], plan)]
