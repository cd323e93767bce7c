"""A GPU measurer whose candidates with ``occupancy == 2`` and one row per block, other
than the key's default, write through a wild pointer first: an illegal address that
poisons the CUDA context, the way a broken variant would.  Used to prove the tuner
survives it (a failing default fails the key, by design, so it is spared)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flyconfigs.errors import GPUError
from flyconfigs.gpu import CompileRequest
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.tuner.measure_gpu import GPUMeasurer
from flyconfigs.tuner.measurer import CheckResult

WILD = r"""
extern "C" __global__ void wild(float* p) { p[(long long)threadIdx.x * 1000003LL] = 1.0f; }
"""


class FaultyMeasurer(GPUMeasurer):
    def prepare(self, key: Mapping[str, Any], copies: int, traffic: int) -> None:
        super().prepare(key, copies, traffic)
        self._default = self.kernel.default_config(key, DeviceQuery.of(self.backend.device().identity))

    def check(self, config: Mapping[str, Any]) -> CheckResult:
        if config["occupancy"] == 2 and config["rows_per_block"] == 1 and dict(config) != self._default:
            kernel = self.backend.load(self.backend.compile(CompileRequest(WILD, "wild")), ("ptr",))
            try:
                kernel.launch((1, 1, 1), (256, 1, 1), (16,))
                self.backend.synchronize()
            except GPUError as exc:
                return CheckResult("launch_error", str(exc), fault=True)
        return super().check(config)
