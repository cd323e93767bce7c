"""What the measuring process is asked and what it answers, as typed records.

The parent sends one of :class:`Prepare`, :class:`Check` or :class:`Time` over the
worker's pipe; :func:`answer` runs it on the process's :class:`Measurer` and the reply
travels back as the record the request names (``None``, :class:`CheckResult`, or
per-config microsecond samples).  A measurer is the GPU one
(:class:`~flyconfigs.tuner.measure_gpu.GPUMeasurer`) or the test backend's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from flyconfigs.schema.models import Resources

__all__ = ["Check", "CheckResult", "CheckStatus", "Measurer", "Prepare", "Request", "Time", "answer"]

CheckStatus = Literal["ok", "compile_error", "launch_error", "wrong_result", "timeout"]


@dataclass(frozen=True)
class CheckResult:
    """One candidate verified: its status, what went wrong, its resources, and whether
    it may have broken the GPU context (the process is then restarted)."""

    status: CheckStatus
    message: str | None = None
    resources: Resources | None = None
    fault: bool = False


@dataclass(frozen=True)
class Prepare:
    """Allocate ``copies`` rotated inputs for ``key`` (``traffic`` bytes per call),
    freeing the previous key's."""

    key: dict[str, Any]
    copies: int
    traffic: int


@dataclass(frozen=True)
class Check:
    """Verify ``config`` against the reference on the prepared inputs."""

    config: dict[str, Any]


@dataclass(frozen=True)
class Time:
    """Per-call microsecond samples of each of ``configs``, interleaved; ``hold`` as
    :attr:`flyconfigs.tuner.timing.TimingPlan.hold`."""

    configs: list[dict[str, Any]]
    launches: int
    samples: int
    warmup: int
    hold: bool = True


Request = Prepare | Check | Time


class Measurer(Protocol):
    """The measuring process's side: it owns the device context."""

    def device(self) -> dict[str, Any]:
        """The device descriptor (a :class:`~flyconfigs.schema.Device` as JSON data)."""
        ...

    def prepare(self, key: Mapping[str, Any], copies: int, traffic: int) -> None: ...
    def check(self, config: Mapping[str, Any]) -> CheckResult: ...
    def time(self, configs: list[Mapping[str, Any]], launches: int, samples: int, warmup: int,
             hold: bool = True) -> list[list[float]]: ...


def answer(measurer: Measurer, request: Request) -> object:
    """Run ``request`` on ``measurer``; ``TypeError`` for anything that is not a request."""
    if isinstance(request, Prepare):
        measurer.prepare(request.key, request.copies, request.traffic)
        return None
    if isinstance(request, Check):
        return measurer.check(request.config)
    if isinstance(request, Time):
        return measurer.time(list(request.configs), request.launches, request.samples, request.warmup, request.hold)
    raise TypeError(f"not a measurer request: {type(request).__name__}")
