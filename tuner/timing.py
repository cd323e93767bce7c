"""The timing protocol for memory-bound kernels, shared by the tuner and the
benchmarks.

Each contender is a function ``run(i)`` that launches one call on the ``i``-th rotated
copy of its inputs on the current stream.  For every contender ``K`` calls over distinct
copies are captured in one CUDA/HIP graph (so per-launch host gaps are not measured);
the graphs are replayed interleaved (A B C A B C …) after a warm-up, each replay timed
with device events, and every sample is the replay time divided by ``K``.  With enough
copies (``K·bytes ≥ 3×`` the last-level cache) every call reads cold memory.

The sampled replays are queued behind a spin kernel (``hold``) that keeps the stream busy
until the host has queued them all, so a sample is the device's time alone: unheld, a
replay whose launch reaches the stream after its start event counts the host's
submission latency too, which varies with the host's load and the process's state and
flattens short calls.  Each held chunk checks that the spin was still running when its
last replay was queued, and is queued again behind a longer spin when it was not.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Measurement", "TimingPlan", "measure", "plan_rotation", "summarize"]


@dataclass(frozen=True)
class TimingPlan:
    """How to time: copies of the inputs, calls per graph, warm-up and sampled replays."""

    copies: int
    launches: int
    warmup: int = 3
    samples: int = 15
    hold: bool = True
    """Queue the sampled replays behind a spin kernel (see the module's docstring)."""


@dataclass(frozen=True)
class Measurement:
    """Per-call microseconds of one contender: all samples and their summary."""

    samples_us: tuple[float, ...]

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (a whole percentile: 0.2, 0.8), interpolated between the
        two nearest samples (``statistics.quantiles``' inclusive method, as numpy's
        default).  Raises :class:`ValueError` for another ``q``."""
        percent = round(q * 100)
        if not 0 < percent < 100 or abs(q * 100 - percent) > 1e-9:
            raise ValueError(f"quantile takes a whole percentile between 0 and 1 exclusive, got {q!r}")
        if len(self.samples_us) == 1:  # statistics.quantiles wants two points before Python 3.13
            return self.samples_us[0]
        value = statistics.quantiles(self.samples_us, n=100, method="inclusive")[percent - 1]
        # statistics interpolates as (a·(n−d) + b·d)/n, which can land an ulp outside the
        # two samples it lies between, even when they are equal (1.4771544093253628 twice
        # gave a p20 below the minimum on an H100); an artifact requires min ≤ p20.
        ordered = sorted(self.samples_us)
        position = (len(ordered) - 1) * percent / 100
        low, high = ordered[math.floor(position)], ordered[math.ceil(position)]
        return min(max(value, low), high)


def plan_rotation(bytes_per_call: int, cache_bytes: int, memory_budget: int = 8 << 30, max_launches: int = 200,
                  min_launches: int = 20, target_us: float | None = None, bandwidth_gbps: float | None = None,
                  buffers_per_copy: int = 1) -> TimingPlan:
    """The one rotation rule: copies so that one replay touches ≥ 3× the cache (each copy
    costing ``buffers_per_copy × bytes_per_call`` of ``memory_budget``), and calls per
    graph.  Without ``target_us`` a graph holds every copy once (between ``min_launches``
    and ``max_launches`` calls); with it, as many calls as fill ``target_us`` at 80% of
    ``bandwidth_gbps`` plus 2 µs each (at most ``max_launches``), and no more copies
    than calls."""
    cold = -(-3 * cache_bytes // max(1, bytes_per_call))
    room = memory_budget // max(1, buffers_per_copy * bytes_per_call)
    if target_us is None:
        copies = max(1, min(cold, room, max_launches))
        return TimingPlan(copies=copies, launches=max(min_launches, min(max_launches, copies)))
    estimate = 2.0 + bytes_per_call / ((bandwidth_gbps or 1000.0) * 1e3 * 0.8)  # µs per call
    launches = int(min(max_launches, max(1, target_us // estimate)))
    return TimingPlan(copies=int(max(1, min(launches, cold, room))), launches=launches)


HOLD_CHUNK = 64
"""Replays queued behind one spin: few enough that the queue never fills while the spin
runs (a full queue would block the host, and the spin end before the chunk is queued)."""
HOLD_FIRST_US = 40.0
"""The host's time to queue one timed replay with its two events, guessed for the first
chunk; each later chunk's spin is sized from the chunk before."""
HOLD_MAX_US = 200_000.0
_cycles_per_us: dict[int, float] = {}


def _spin_cycles_per_us() -> float:
    """The device's spin-kernel clock, measured once per device (``torch.cuda._sleep``
    counts cycles of the SM clock, which runs at its own rate under load)."""
    import torch

    device = torch.cuda.current_device()
    if device not in _cycles_per_us:
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        cycles = 2_000_000
        torch.cuda._sleep(cycles)  # type: ignore[no-untyped-call]  # the first launch loads the kernel
        start.record()
        torch.cuda._sleep(cycles)  # type: ignore[no-untyped-call]
        end.record()
        end.synchronize()
        _cycles_per_us[device] = cycles / max(1.0, start.elapsed_time(end) * 1e3)
    return _cycles_per_us[device]


def measure(contenders: Sequence[Callable[[int], None]], plan: TimingPlan) -> list[Measurement]:
    """Time every contender under ``plan``, interleaved; returns one measurement each.

    Needs torch (its graphs work on CUDA and ROCm alike)."""
    import torch

    graphs = []
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    for run in contenders:
        with torch.cuda.stream(stream):
            for i in range(min(plan.copies, 3)):
                run(i)
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(plan.launches):
                run(i % plan.copies)
        graphs.append(graph)
    torch.cuda.synchronize()
    for _ in range(plan.warmup):
        for graph in graphs:
            graph.replay()
    torch.cuda.synchronize()
    order = [(s, g) for s in range(plan.samples) for g in range(len(graphs))]
    starts = [[torch.cuda.Event(enable_timing=True) for _ in range(plan.samples)] for _ in graphs]  # type: ignore[no-untyped-call]
    ends = [[torch.cuda.Event(enable_timing=True) for _ in range(plan.samples)] for _ in graphs]  # type: ignore[no-untyped-call]

    def queue(part: list[tuple[int, int]]) -> None:
        for s, g in part:
            starts[g][s].record()
            graphs[g].replay()
            ends[g][s].record()

    if not plan.hold:
        queue(order)
    else:
        cycles_per_us = _spin_cycles_per_us()
        per_replay_us = HOLD_FIRST_US
        for first in range(0, len(order), HOLD_CHUNK):
            part = order[first:first + HOLD_CHUNK]
            hold_us = min(HOLD_MAX_US, 50.0 + 2 * per_replay_us * len(part))  # twice the host's pace
            while True:
                released = torch.cuda.Event()  # type: ignore[no-untyped-call]
                torch.cuda._sleep(int(hold_us * cycles_per_us))  # type: ignore[no-untyped-call]
                released.record()
                queued = time.perf_counter()
                queue(part)
                per_replay_us = (time.perf_counter() - queued) * 1e6 / len(part)
                if not released.query() or hold_us >= HOLD_MAX_US:  # type: ignore[no-untyped-call]
                    break
                hold_us = min(HOLD_MAX_US, hold_us * 4)  # the spin ended first: queue the chunk again
    torch.cuda.synchronize()
    out = []
    for g in range(len(graphs)):
        per_call = tuple(starts[g][s].elapsed_time(ends[g][s]) * 1e3 / plan.launches for s in range(plan.samples))
        out.append(Measurement(per_call))
    graphs.clear()
    return out


def summarize(m: Measurement, bytes_per_call: int) -> dict[str, float]:  # the one timing summary
    """Median, p20, p80, min (µs) and bandwidth (GB/s at the median)."""
    median = m.median_us
    return {
        "median_us": median,
        "p20_us": m.quantile(0.2),
        "p80_us": m.quantile(0.8),
        "min_us": min(m.samples_us),
        "samples": len(m.samples_us),
        "bandwidth_gbps": bytes_per_call / (median * 1e-6) / 1e9,
    }
