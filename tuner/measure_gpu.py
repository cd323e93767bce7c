"""The measurer that runs in the worker process on a real GPU (CUDA or HIP backend).

It owns the GPU context and loads the kernel by its entry-point name
(:func:`~flyconfigs.kernels.plugin.tunable_kernel`), so it serves any declared kernel:
it builds the kernel's workload for a key, checks each candidate against the
reference, reads its resources and times candidates with the protocol of
:mod:`flyconfigs.tuner.timing`.  Through its workload's ``release`` (a no-op unless the
family unloads variants), configs are timed with only their own variants loaded, and a new key
starts with none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flyconfigs.errors import CompileError, GPUError, TuneError
from flyconfigs.kernels.plugin import TunableKernel, Workload, tunable_kernel
from flyconfigs.tuner.measurer import CheckResult

__all__ = ["GPUMeasurer"]

MESSAGE_LIMIT = 4000


class GPUMeasurer:
    """Worker-side measurer; built in the child by :class:`~flyconfigs.tuner.worker.Worker`."""

    def __init__(self, kernel: str, backend: str | None = None, ordinal: int = 0) -> None:
        from flyconfigs.errors import BackendUnavailableError
        from flyconfigs.gpu import get_backend

        self.kernel: TunableKernel = tunable_kernel(kernel)
        self.backend = get_backend(backend, ordinal)
        self.backend.device()
        import torch

        if not torch.cuda.is_available():
            raise BackendUnavailableError("torch sees no GPU; the tuner needs torch with CUDA or ROCm")
        torch.cuda.set_device(ordinal)
        self.backend.activate()
        self._workload: Workload | None = None

    def device(self) -> dict[str, Any]:
        return self.backend.device().model_dump(mode="json")

    def prepare(self, key: Mapping[str, Any], copies: int, traffic: int) -> None:
        """Allocate ``copies`` rotated inputs for ``key`` (frees the previous key's)."""
        import torch

        if self._workload is not None:
            self._release([])
        self._workload = None
        torch.cuda.empty_cache()
        workload = self.kernel.workload(key, copies, self.backend)
        if not isinstance(workload, Workload):
            raise TuneError(f"kernel {self.kernel.name!r}: its workload is a {type(workload).__name__}, not a "
                            "flyconfigs.kernels.plugin.Workload (subclass it)")
        self._workload = workload

    def _prepared(self) -> Workload:
        if self._workload is None:
            raise RuntimeError("check or time before prepare")
        return self._workload

    def _release(self, keep: list[Mapping[str, Any]]) -> None:
        if self._workload is not None:
            self._workload.release(keep)

    def check(self, config: Mapping[str, Any]) -> CheckResult:
        """Verify one candidate: its status, message and resources."""
        workload = self._prepared()
        try:
            wrong = workload.check(config)
        except CompileError as exc:
            return CheckResult("compile_error", str(exc)[:MESSAGE_LIMIT])
        except GPUError as exc:
            return CheckResult("launch_error", str(exc)[:MESSAGE_LIMIT], fault=True)
        resources = workload.resources(config)
        if wrong:
            return CheckResult("wrong_result", wrong, resources)
        return CheckResult("ok", None, resources)

    def time(self, configs: list[Mapping[str, Any]], launches: int, samples: int, warmup: int,
             hold: bool = True) -> list[list[float]]:
        """Per-call microsecond samples of each config, interleaved."""
        from flyconfigs.tuner.timing import TimingPlan, measure

        workload = self._prepared()
        self._release(configs)
        plan = TimingPlan(copies=workload.copies, launches=launches, warmup=warmup, samples=samples, hold=hold)
        return [list(m.samples_us) for m in measure([workload.launcher(c) for c in configs], plan)]
