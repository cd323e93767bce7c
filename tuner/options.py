"""What a tuning run and the tuning of each of its keys share: the run's options, one
key's result, the progress callback and the parent-side compiler's interface."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.schema.models import Device

__all__ = ["KeyResult", "Progress", "Toolchain", "TuneOptions"]


class Toolchain(Protocol):
    """The parent-side compiler: the GPU layer's (:mod:`flyconfigs.tuner.toolchain`) or the test backend's."""

    name: str

    def versions(self) -> dict[str, str]: ...
    def options(self) -> list[str]: ...
    def compile_all(self, kernel: TunableKernel, key: dict[str, Any], configs: list[dict[str, Any]],
                    device: Device) -> list[str | None]: ...
    def compile_ahead(self, kernel: TunableKernel, key: dict[str, Any], configs: list[dict[str, Any]],
                      device: Device) -> int: ...


@dataclass(frozen=True)
class TuneOptions:
    """Knobs of a run: candidates per key (``budget``), finalists, samples, timeouts."""

    budget: int | None = None
    finalists: int = 6
    screen_group: int = 16
    """Candidates screened together, the default among them: a measurer that releases
    what it loaded (see :class:`~flyconfigs.kernels.plugin.Workload`) then times each
    group with only its own variants loaded."""
    screen_samples: int = 5
    samples: int = 15
    warmup: int = 3
    screen_target_us: float = 300.0
    final_target_us: float = 1500.0
    hold: bool = True
    """Queue sampled replays behind a spin kernel (:attr:`flyconfigs.tuner.timing.TimingPlan.hold`);
    the artifact records it as ``timing_protocol.held``."""
    max_launches: int = 200
    memory_budget: int = 8 << 30
    check_timeout_s: float = 120.0
    resume: bool = False


@dataclass
class KeyResult:
    """What happened to one key."""

    key: dict[str, Any]
    path: Path | None
    skipped: bool = False
    candidates: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    winner_us: float | None = None
    default_us: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)


Progress = Callable[[str, dict[str, Any]], None]
