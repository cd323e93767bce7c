"""The tuning of one key on one measuring worker: plan → compile → verify → time →
select, and the artifact.

Compilation runs in the parent (a process pool, through the on-disk cache); verifying
and timing run in an isolated worker process (:mod:`flyconfigs.tuner.worker`), restarted
after a candidate faults it.  Timing is two-stage: a short interleaved screen of every
verified candidate, in groups with the default in each (each ranked by its time over the
default's beside it), then a full interleaved measurement of the best few with the
default; near-ties with the best are re-measured before the winner is chosen.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from flyconfigs._version import __version__
from flyconfigs.errors import TuneError
from flyconfigs.kernels.plugin import TunableKernel, tool_versions
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema.canonical import same_value
from flyconfigs.schema.models import (
    SCHEMA_VERSION,
    Artifact,
    Candidate,
    Choice,
    Device,
    KernelRef,
    Provenance,
    ScreenProtocol,
    Selection,
    Timing,
    TimingProtocol,
)
from flyconfigs.tuner import emit
from flyconfigs.tuner.measurer import CheckResult
from flyconfigs.tuner.options import KeyResult, Progress, Toolchain, TuneOptions
from flyconfigs.tuner.select import decide, near_ties
from flyconfigs.tuner.timing import Measurement, TimingPlan, plan_rotation, summarize
from flyconfigs.tuner.worker import Worker, WorkerLost

__all__ = ["KeyTuner", "candidate_configs", "rotation"]

SCREEN_WARMUP = 1
"""Warm-up replays before the screen's samples (the final takes ``TuneOptions.warmup``)."""


def rotation(bytes_per_call: int, device: Device, options: TuneOptions, target_us: float) -> TimingPlan:
    """The copies and calls per replay a run times ``bytes_per_call`` with on ``device``
    for a replay of about ``target_us`` (its screen's or its final stage's), inputs and
    outputs rotated (:func:`~flyconfigs.tuner.timing.plan_rotation`)."""
    return plan_rotation(bytes_per_call, device.l2_bytes or 0, options.memory_budget, options.max_launches,
                         target_us=target_us, bandwidth_gbps=device.memory_bandwidth_gbps, buffers_per_copy=2)


def _timing(samples: Sequence[float], bytes_per_call: int) -> Timing:
    s = summarize(Measurement(tuple(samples)), bytes_per_call)
    return Timing(median_us=s["median_us"], p20_us=s["p20_us"], p80_us=s["p80_us"], min_us=s["min_us"],
                  samples=int(s["samples"]), bandwidth_gbps=s["bandwidth_gbps"])


@dataclass(frozen=True)
class _Context:
    """What every key of a run shares."""

    kernel: TunableKernel
    toolchain: Toolchain
    options: TuneOptions
    versions: dict[str, str]
    source_sha: str
    notify: Progress
    command: list[str]


@dataclass(frozen=True)
class _KeyPlan:
    """The candidates of one key: the default first, then the rest of the space."""

    configs: list[dict[str, Any]]
    default_index: int
    traffic: int
    copies: int
    launches: int
    screen_launches: int


@dataclass(frozen=True)
class _Selected:
    """The timed candidates and the decision among them."""

    timings: dict[int, Timing]
    final: frozenset[int]
    """The candidates whose timing is from the final protocol; the others' are from the screen."""
    winner_index: int
    noise_band: float
    remeasured: bool
    kept_default: bool


class KeyTuner:
    """The per-key pipeline on one measuring worker: plan, compile, verify, time, select,
    and the artifact.  Local runs make one per worker; a fleet makes one per GPU actor.

    ``versions`` are what artifacts record as ``backend_versions`` (the toolchain's, the
    kernel's tools' and the device driver's); ``command`` the command line recorded as
    provenance (default: this process's)."""

    def __init__(self, kernel: TunableKernel, toolchain: Toolchain, worker: Worker, device: Device,
                 options: TuneOptions = TuneOptions(), notify: Progress | None = None,
                 command: list[str] | None = None) -> None:
        self.worker = worker
        self.device = device
        self.versions = {**toolchain.versions(), **tool_versions(kernel), "driver": device.driver_version or "unknown"}
        self.source_sha = kernel.source_sha256()
        self._ctx = _Context(kernel, toolchain, options, self.versions, self.source_sha,
                             notify or (lambda event, data: None),
                             emit.command_line() if command is None else list(command))

    def tune(self, key: dict[str, Any]) -> tuple[KeyResult, Artifact]:
        """Tune one checked key; the artifact is not written (the caller emits it).
        Raises :class:`TuneError` when the default fails or the worker is lost while timing."""
        ctx, worker, device = self._ctx, self.worker, self.device
        clock = time.perf_counter
        seconds: dict[str, float] = {}
        t0 = clock()
        plan = _plan(ctx, key, device)
        status = _compile(ctx, key, plan, device)
        seconds["compile"] = clock() - t0
        t0 = clock()
        status = _verify(ctx, key, plan, status, worker)
        seconds["verify"] = clock() - t0
        t0 = clock()
        selected = _select(ctx, key, plan, status, worker)
        seconds["time"] = clock() - t0
        artifact = _artifact(ctx, key, device, plan, status, selected)
        counts: dict[str, int] = {}
        for s in status:
            counts[s.status] = counts.get(s.status, 0) + 1
        result = KeyResult(key, None, False, len(plan.configs), counts, selected.timings[selected.winner_index].median_us,
                           selected.timings[plan.default_index].median_us, seconds)
        return result, artifact


def candidate_configs(kernel: TunableKernel, key: dict[str, Any], device: Device, budget: int | None) -> list[dict[str, Any]]:
    """The configs a run tries for ``key`` on ``device``: the default first, then the
    rest of the kernel's space, at most ``budget`` of them."""
    query = DeviceQuery.of(device.identity)
    default = kernel.default_config(key, query)
    others = [c for c in kernel.space(key, query) if not same_value(c, default)]
    return [default, *others][: budget or None]


def _plan(ctx: _Context, key: dict[str, Any], device: Device) -> _KeyPlan:
    """The kernel's space for ``key`` on ``device`` (the default first, cut to the
    budget) and the rotation: copies enough for a replay to touch 3× the cache, up to
    the launches per replay (at most 200), so a key that moves under 1.5% of the cache
    per call, as at small M, is timed partly or wholly from the cache."""
    configs = candidate_configs(ctx.kernel, key, device, ctx.options.budget)
    traffic = ctx.kernel.traffic(key)
    final = rotation(traffic, device, ctx.options, ctx.options.final_target_us)
    screen = rotation(traffic, device, ctx.options, ctx.options.screen_target_us).launches
    return _KeyPlan(configs, 0, traffic, final.copies, final.launches, min(screen, final.launches))


def _compile(ctx: _Context, key: dict[str, Any], plan: _KeyPlan, device: Device) -> list[CheckResult]:
    """Every candidate compiled ahead; compile errors recorded, the rest still to verify."""
    errors = ctx.toolchain.compile_all(ctx.kernel, key, plan.configs, device)
    return [CheckResult("ok") if error is None else CheckResult("compile_error", error) for error in errors]


def _verify(ctx: _Context, key: dict[str, Any], plan: _KeyPlan, status: list[CheckResult],
            worker: Worker) -> list[CheckResult]:
    """Each compiled candidate checked against the reference in the worker; a candidate
    that kills or hangs the worker is recorded and the worker restarted."""
    options = ctx.options
    out = list(status)
    worker.prepare(key, plan.copies, plan.traffic, timeout=options.check_timeout_s)
    for i, config in enumerate(plan.configs):
        if out[i].status != "ok":
            continue
        try:
            out[i] = worker.check(config, timeout=options.check_timeout_s)
        except WorkerLost as lost:
            out[i] = CheckResult("timeout" if "no answer" in lost.reason else "launch_error",
                                 f"faulted the worker: {lost.reason}")
            _restart(worker, key, plan, options)
            continue
        if out[i].fault:
            _restart(worker, key, plan, options)
        ctx.notify("candidate", {"key": key, "index": i, "of": len(plan.configs), "status": out[i].status})
    default = out[plan.default_index]
    if default.status != "ok":
        raise TuneError(f"the default config failed for {key}: {default.message}")
    return out


def _screen(worker: Worker, plan: _KeyPlan, verified: list[int], options: TuneOptions) -> tuple[dict[int, Timing], dict[int, float]]:
    """Every verified candidate timed briefly, interleaved in groups of ``screen_group``
    with the default in each: each one's timing and its median over the default's in
    its group (what the finalists are ranked by, so the groups need not run alike)."""
    default_index = plan.default_index
    others = [i for i in verified if i != default_index]
    size = _screen_group_size(options) - 1
    timings: dict[int, Timing] = {}
    ratios: dict[int, float] = {default_index: 1.0}
    for first in range(0, max(1, len(others)), size):
        group = [default_index, *others[first:first + size]]
        measured = _time(worker, [plan.configs[i] for i in group], plan.screen_launches, options.screen_samples,
                         SCREEN_WARMUP, plan, options)
        timings.setdefault(default_index, measured[0])
        for i, timing in zip(group[1:], measured[1:], strict=True):
            timings[i] = timing
            ratios[i] = timing.median_us / measured[0].median_us
    return timings, ratios


def _screen_group_size(options: TuneOptions) -> int:
    """Candidates timed together in the screen, the default among them (at least two)."""
    return max(2, options.screen_group)


def _select(ctx: _Context, key: dict[str, Any], plan: _KeyPlan, status: list[CheckResult], worker: Worker) -> _Selected:
    """A short interleaved screen of every verified candidate, a full measurement of the
    best few with the default, near-ties re-measured, then the decision."""
    options = ctx.options
    configs = plan.configs
    default_index = plan.default_index
    verified = [i for i, s in enumerate(status) if s.status == "ok"]
    screen, ratios = _screen(worker, plan, verified, options)
    finalists = sorted(verified, key=lambda i: ratios[i])[: options.finalists]
    if default_index not in finalists:
        finalists.append(default_index)
    final = _time(worker, [configs[i] for i in finalists], plan.launches, options.samples, options.warmup, plan, options)
    timings = {i: final[n] for n, i in enumerate(finalists)}
    for i in verified:
        timings.setdefault(i, screen[i])
    ties = [finalists[n] for n in near_ties(final)]
    remeasured = len(ties) > 1
    if remeasured:
        pool = ties if default_index in ties else [*ties, default_index]
        again = _time(worker, [configs[i] for i in pool], plan.launches, options.samples, options.warmup, plan, options)
        for n, i in enumerate(pool):
            timings[i] = again[n]
    else:
        pool = finalists
    decision = decide([configs[i] for i in pool], [timings[i] for i in pool], pool.index(default_index))
    return _Selected(timings, frozenset(finalists), pool[decision.winner], decision.noise_band, remeasured,
                     decision.kept_default)


def _artifact(ctx: _Context, key: dict[str, Any], device: Device, plan: _KeyPlan, status: list[CheckResult],
              selected: _Selected) -> Artifact:
    """The measured artifact: every candidate with what happened to it, the winner, the
    default, how the winner was chosen, and the provenance."""
    configs, timings = plan.configs, selected.timings
    candidates = []
    for i, (c, s) in enumerate(zip(configs, status, strict=True)):
        timing = timings.get(i) if s.status == "ok" else None
        timed_in: Literal["screen", "final"] | None = (
            None if timing is None else "final" if i in selected.final else "screen")
        candidates.append(Candidate(config=c, status=s.status, message=s.message, timing=timing,
                                    resources=s.resources, timed_in=timed_in))
    winner, default = selected.winner_index, plan.default_index
    return Artifact(
        schema_version=SCHEMA_VERSION,
        kernel=KernelRef(name=ctx.kernel.name, version=ctx.kernel.version, source_sha256=ctx.source_sha),
        device=device,
        key=key,
        candidates=candidates,
        winner=Choice(config=configs[winner], timing=timings[winner]),
        default=Choice(config=configs[default], timing=timings[default]),
        selection=Selection(rule="beat-default-beyond-noise", noise_band=selected.noise_band,
                            remeasured=selected.remeasured, kept_default=selected.kept_default),
        provenance=Provenance(
            tool=f"flyconfigs {__version__}",
            backend=ctx.toolchain.name,
            backend_versions=ctx.versions,
            compile_options=ctx.toolchain.options(),
            timing_protocol=TimingProtocol(method="graph-replay", launches_per_sample=plan.launches,
                                           warmup=ctx.options.warmup, samples=ctx.options.samples,
                                           rotate_bytes=plan.copies * plan.traffic, interleaved=True,
                                           held=ctx.options.hold,
                                           screen=ScreenProtocol(launches_per_sample=plan.screen_launches,
                                                                 warmup=SCREEN_WARMUP,
                                                                 samples=ctx.options.screen_samples,
                                                                 group_size=_screen_group_size(ctx.options),
                                                                 finalists=ctx.options.finalists)),
            host=emit.host(),
            created=emit.now_utc(),
            git_revision=emit.git_revision(),
            command=ctx.command,
        ),
    )


def _time(worker: Worker, configs: list[dict[str, Any]], launches: int, samples: int, warmup: int,
          plan: _KeyPlan, options: TuneOptions) -> list[Timing]:
    try:
        raw = worker.time(configs, launches, samples, warmup, timeout=max(120.0, options.check_timeout_s),
                          hold=options.hold)
    except WorkerLost as lost:
        raise TuneError(f"timing verified candidates lost the worker: {lost.reason}") from None
    return [_timing(s, plan.traffic) for s in raw]


def _restart(worker: Worker, key: dict[str, Any], plan: _KeyPlan, options: TuneOptions) -> None:
    worker.restart()
    worker.prepare(key, plan.copies, plan.traffic, timeout=options.check_timeout_s)
