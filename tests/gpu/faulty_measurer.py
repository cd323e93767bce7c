"""A GPU measurer whose candidates with ``occupancy == 2`` and one row per block write
through a wild pointer first: an illegal address that poisons the CUDA context, the
way a broken variant would.  Used to prove the tuner survives it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flyconfigs.errors import GPUError
from flyconfigs.gpu import CompileRequest
from flyconfigs.tuner.measure_gpu import GPUMeasurer
from flyconfigs.tuner.measurer import CheckResult

WILD = r"""
extern "C" __global__ void wild(float* p) { p[(long long)threadIdx.x * 1000003LL] = 1.0f; }
"""


class FaultyMeasurer(GPUMeasurer):
    def check(self, config: Mapping[str, Any]) -> CheckResult:
        if config["occupancy"] == 2 and config["rows_per_block"] == 1:
            kernel = self.backend.load(self.backend.compile(CompileRequest(WILD, "wild")), ("ptr",))
            try:
                kernel.launch((1, 1, 1), (256, 1, 1), (16,))
                self.backend.synchronize()
            except GPUError as exc:
                return CheckResult("launch_error", str(exc), fault=True)
        return super().check(config)
