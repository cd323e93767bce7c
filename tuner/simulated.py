"""The test backend: a simulated device and measurer for exercising the tuner on a CPU.

Nothing here touches a GPU.  Times are a deterministic function of the config (so
selection can be predicted) plus seeded noise; named configs can fail to compile,
produce a wrong result, hang, or kill the worker process the way a GPU fault kills a
context.  It exists because no GPU is available where the tests run; artifacts it makes
say ``backend: simulated``, name the arch ``simulated`` and a simulated product, are
refused by ``flyconfigs publish`` and are never served to any other device.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from typing import Any

from flyconfigs.kernels.plugin import tunable_kernel
from flyconfigs.schema.models import TEST_DEVICE_PRODUCT, Resources
from flyconfigs.tuner.measurer import CheckResult

__all__ = ["SIMULATED_DEVICE", "SIMULATED_ORDINALS", "SimulatedMeasurer", "SimulatedToolchain", "simulated_time"]

SIMULATED_ORDINALS = (0, 1)
"""The devices ``--devices all`` finds on the test backend."""
SIMULATED_DEVICE = {
    "vendor": "nvidia",
    "arch": "simulated",
    "product": TEST_DEVICE_PRODUCT,
    "compute_units": 4,
    "features": [],
    "wave_size": 32,
    "l2_bytes": 1 << 20,
    "memory_bandwidth_gbps": 100.0,
    "driver_version": "simulated",
    "runtime_version": "simulated",
    "ordinal": 0,
}


def _behaviour(config: Mapping[str, Any], table: Mapping[str, str]) -> str | None:
    return table.get(_name(config))


def _name(config: Mapping[str, Any]) -> str:
    return "-".join(f"{k}={config[k]}" for k in sorted(config))


def simulated_time(traffic: int, config: Mapping[str, Any], speeds: Mapping[str, float]) -> float:
    """Microseconds per call: 2 µs plus the key's traffic at 4 TB/s, times the config's
    speed factor (``speeds`` by config name, default 1.0)."""
    base = 2.0 + traffic / 4e6
    return base * speeds.get(_name(config), 1.0)


class SimulatedMeasurer:
    """Worker-side measurer of the test backend.

    ``behaviour`` maps config names (see :func:`config_name`) to ``wrong``, ``crash``
    (the process exits, like a faulted context), ``hang`` or ``launch_error``.  With
    ``drift`` every timing request runs that fraction slower than the one before, as on
    a machine whose state moves between requests.  A request made without the hold reads
    no call faster than ``unheld_floor_us``, as unheld replays read the host's
    submission pace when it is slower than the device.
    """

    def __init__(self, speeds: Mapping[str, float] | None = None, behaviour: Mapping[str, str] | None = None,
                 noise: float = 0.002, seed: int = 0, ordinal: int = 0, delay_s: float = 0.0,
                 kernel: str | None = None, drift: float = 0.0, unheld_floor_us: float = 0.0) -> None:
        # Loaded by its entry-point name in this process, as the GPU measurer loads it.
        self.kernel = tunable_kernel(kernel) if kernel is not None else None
        self.ordinal = ordinal
        self.delay_s = delay_s
        self.speeds = dict(speeds or {})
        self.behaviour = dict(behaviour or {})
        self.noise = noise
        self.rng = random.Random(seed)
        self.drift = drift
        self.unheld_floor_us = unheld_floor_us
        self.requests = 0
        self.key: dict[str, Any] = {}
        self.traffic = 0

    def device(self) -> dict[str, Any]:
        return {**SIMULATED_DEVICE, "ordinal": self.ordinal}

    def prepare(self, key: Mapping[str, Any], copies: int, traffic: int) -> None:
        if self.kernel is not None and self.kernel.traffic(key) != traffic:
            raise RuntimeError(f"the worker's {self.kernel.name} moves {self.kernel.traffic(key)} bytes at {key}, "
                               f"the parent's {traffic}")
        self.key = dict(key)
        self.traffic = traffic

    def check(self, config: Mapping[str, Any]) -> CheckResult:
        if self.delay_s:
            time.sleep(self.delay_s * (1 + self.traffic / (1 << 24)))
        what = _behaviour(config, self.behaviour)
        if what == "crash":
            os._exit(17)
        if what == "hang":
            time.sleep(3600)
        if what == "launch_error":
            return CheckResult("launch_error", "simulated launch failure", fault=True)
        resources = Resources(registers=32, spill_bytes=0, shared_bytes=0, max_blocks_per_cu=8, occupancy=1.0)
        if what == "wrong":
            return CheckResult("wrong_result", "simulated: 3 outputs off the reference", resources)
        return CheckResult("ok", None, resources)

    def time(self, configs: list[Mapping[str, Any]], launches: int, samples: int, warmup: int,
             hold: bool = True) -> list[list[float]]:
        out = []
        self.requests += 1
        for config in configs:
            t = simulated_time(self.traffic, config, self.speeds) * (1 + self.drift * (self.requests - 1))
            if not hold:
                t = max(t, self.unheld_floor_us)
            out.append([t * (1 + self.rng.gauss(0, self.noise)) for _ in range(samples)])
        return out


class SimulatedToolchain:
    """Parent-side compiler of the test backend: named configs fail to compile."""

    name = "simulated"

    def __init__(self, compile_errors: Mapping[str, str] | None = None) -> None:
        self.compile_errors = dict(compile_errors or {})
        self.compiled = 0
        self.queued_ahead: list[dict[str, Any]] = []

    def versions(self) -> dict[str, str]:
        return {"simulated": "1"}

    def options(self) -> list[str]:
        return ["-simulated"]

    def compile_all(self, kernel: Any, key: Mapping[str, Any], configs: list[Mapping[str, Any]],
                    device: Any) -> list[str | None]:
        self.compiled += len(configs)
        return [self.compile_errors.get(_name(c)) for c in configs]

    def compile_ahead(self, kernel: Any, key: Mapping[str, Any], configs: list[Mapping[str, Any]],
                      device: Any) -> int:
        """Records the key queued (nothing is compiled ahead here)."""
        self.queued_ahead.append(dict(key))
        return 0


config_name = _name
