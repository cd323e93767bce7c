"""The tuning loop: plan → compile → verify → time → select → emit, one key at a time.

Compilation runs in the parent (a process pool, through the on-disk cache), queued ahead
so that later keys compile while the GPU measures this one; verifying
and timing run in an isolated worker process (:mod:`flyconfigs.tuner.worker`), restarted
after a candidate faults it.  Timing is two-stage: a short interleaved screen of every
verified candidate, in groups with the default in each (each ranked by its time over the
default's beside it), then a full interleaved measurement of the best few with the
default; near-ties with the best are re-measured before the winner is chosen.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from flyconfigs._version import __version__
from flyconfigs.errors import TuneError
from flyconfigs.kernels.plugin import TunableKernel, tool_versions
from flyconfigs.registry.device import DeviceQuery
from flyconfigs.schema.canonical import same_value
from flyconfigs.schema.models import (
    SCHEMA_VERSION,
    Artifact,
    Candidate,
    Choice,
    Device,
    DeviceIdentity,
    KernelRef,
    Provenance,
    ScreenProtocol,
    Selection,
    Timing,
    TimingProtocol,
)
from flyconfigs.tuner import emit
from flyconfigs.tuner.measurer import CheckResult
from flyconfigs.tuner.select import decide, near_ties
from flyconfigs.tuner.timing import Measurement, TimingPlan, plan_rotation, summarize
from flyconfigs.tuner.worker import Worker, WorkerLost

__all__ = ["KeyResult", "KeyTuner", "Progress", "TuneOptions", "TuneReport", "add_seconds", "candidate_configs",
           "disagreements", "rotation", "spread_cross_checks", "tune"]

SCREEN_WARMUP = 1
"""Warm-up replays before the screen's samples (the final takes ``TuneOptions.warmup``)."""


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


@dataclass
class TuneReport:
    """Every key's result and where the time went."""

    device: Device
    results: list[KeyResult] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: {"compile": 0.0, "verify": 0.0, "time": 0.0, "total": 0.0})
    worker_restarts: int = 0
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    """Where it tuned, one entry per worker: ``HOST GPU ORDINAL`` (a fleet adds the node)."""
    left_out: list[str] = field(default_factory=list)
    """GPUs a fleet did not tune on, each with the reason (not the target, failed to start)."""
    lost: list[str] = field(default_factory=list)
    """Workers a fleet lost mid-run, each with what happened; their keys went back in the queue."""
    interrupted: bool = False
    """The run was stopped (Ctrl-C, a termination signal) before its last key."""
    not_reached: list[dict[str, Any]] = field(default_factory=list)
    """The keys an interrupted run wrote no artifact for, in the order asked."""


Progress = Callable[[str, dict[str, Any]], None]


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


def tune(
    kernel: TunableKernel,
    keys: Sequence[dict[str, Any]],
    out: Path,
    worker: Worker | Sequence[Worker],
    toolchain: Toolchain,
    options: TuneOptions = TuneOptions(),
    progress: Progress | None = None,
    cross_check: bool = False,
    stop: threading.Event | None = None,
) -> TuneReport:
    """Tune every key of ``keys`` for ``kernel``; one artifact per key in ``out``.

    With several workers (one per GPU) keys are handed out dynamically — a worker takes
    the next key when it finishes one — and every artifact goes through the same atomic
    emit.  ``cross_check`` then re-tunes every key on a second worker whose device has
    the same identity and reports the keys whose winners differ (``report.disagreements``).
    Setting ``stop`` (a signal handler's way) ends the run at the next candidate or key,
    a key in flight left unwritten: it returns with ``report.interrupted`` set, the
    results and phase times of the keys it wrote, and the others in
    ``report.not_reached`` (``resume`` tunes them).  A ``KeyboardInterrupt`` (Ctrl-C
    where the caller installed no handler) ends it the same way, at whatever point it
    arrives; a key whose artifact it had just written may then be listed as not reached.
    Raises :class:`TuneError` for an unusable ``out`` or key."""
    workers = [worker] if isinstance(worker, Worker) else list(worker)
    if not workers:
        raise TuneError("no worker to tune on")
    emit.check_writable(out)
    checked = [kernel.check_key(k) for k in keys]
    devices = [Device.model_validate(w.device) for w in workers]
    report = TuneReport(devices[0], workers=[f"{emit.host()} GPU {d.ordinal if d.ordinal is not None else 0}" for d in devices])
    notify = _locked(progress or (lambda event, data: None), stop)
    tuners = [KeyTuner(kernel, toolchain, w, d, options, notify=notify) for w, d in zip(workers, devices, strict=True)]
    versions, source_sha = tuners[0].versions, tuners[0].source_sha
    started = time.perf_counter()
    notify("start", {"keys": len(checked), "device": ", ".join(sorted({d.identity.describe() for d in devices})),
                     "workers": len(workers)})
    results: dict[int, KeyResult] = {}
    winners: dict[int, list[tuple[int, Artifact]]] = {}
    todo: queue.Queue[int] = queue.Queue()
    for index in range(len(checked)):
        todo.put(index)
    lock = threading.Lock()
    no_more_keys = threading.Event()  # a worker failed or the run was stopped

    resumed: dict[int, bool] = {}

    def tuned_before(index: int, identity: DeviceIdentity) -> bool:
        # --resume's check; read once a key for the first device's identity, which both
        # the compile queue and the workers ask about.
        if not options.resume:
            return False
        shared = identity == devices[0].identity
        if shared and index in resumed:
            return resumed[index]
        found = emit.already_tuned(out, kernel.name, checked[index], identity, source_sha, versions)
        if shared:
            resumed[index] = found
        return found

    def run_worker(slot: int) -> None:
        while not no_more_keys.is_set():
            try:
                index = todo.get_nowait()
            except queue.Empty:
                return
            key = checked[index]
            if tuned_before(index, devices[slot].identity):
                with lock:
                    results[index] = KeyResult(key, None, skipped=True)
                notify("skip", {"key": key})
                continue
            result, artifact = tuners[slot].tune(key)
            with lock:
                if report.interrupted:  # the report is made: a key finished after it is not written
                    return
                result.path = emit.write_artifact(out, artifact)
                add_seconds(report, result)
                results[index] = result
                winners.setdefault(index, []).append((slot, artifact))
            notify("key", {"key": key, "result": result})

    def recheck(slot: int) -> None:
        for index in pinned[slot]:
            if no_more_keys.is_set():
                return
            result, artifact = tuners[slot].tune(checked[index])
            with lock:
                if report.interrupted:
                    return
                add_seconds(report, result)
                winners[index].append((slot, artifact))
            notify("cross-check", {"key": checked[index]})

    def queue_compiles() -> None:
        # Every key is queued for the first worker's device (the run's devices share one arch).
        try:
            for index, key in enumerate(checked):
                if no_more_keys.is_set():
                    return
                if tuned_before(index, devices[0].identity):
                    continue
                toolchain.compile_ahead(kernel, key, candidate_configs(kernel, key, devices[0], options.budget), devices[0])
        except Exception:  # noqa: BLE001 - the key's own compile_all meets the same error and reports it
            return

    ahead = threading.Thread(target=queue_compiles, name="flyconfigs-compile-ahead", daemon=True)
    if len({d.arch for d in devices}) == 1:
        ahead.start()
    pinned: list[list[int]] = []
    try:
        _run_all(run_worker, len(workers), no_more_keys)
        if cross_check and len(workers) > 1:
            pinned = spread_cross_checks({i: found[0][0] for i, found in winners.items()}, [d.identity for d in devices])
            _run_all(recheck, len(workers), no_more_keys)
    except KeyboardInterrupt:
        with lock:
            no_more_keys.set()
            report.interrupted = True
            report.not_reached = [checked[i] for i in range(len(checked)) if i not in results]
    finally:
        no_more_keys.set()
        if ahead.is_alive():
            ahead.join()
    with lock:
        if cross_check and len(workers) > 1:
            report.disagreements = disagreements(checked, winners)
        report.results = [results[i] for i in sorted(results)]
    report.seconds["total"] = time.perf_counter() - started
    report.worker_restarts = sum(w.restarts for w in workers)
    return report


def add_seconds(report: TuneReport, result: KeyResult) -> None:
    """Add one key's phase times to the run's."""
    for name, value in result.seconds.items():
        report.seconds[name] = report.seconds.get(name, 0.0) + value


def spread_cross_checks(first: dict[int, int], identities: Sequence[Any], nodes: Sequence[str] | None = None,
                        alive: Sequence[bool] | None = None) -> list[list[int]]:
    """For each key (tuned first on worker ``first[key]``), the worker that re-tunes it:
    another worker of the same device identity (still ``alive``, when that is given).

    The checks spread as evenly as that rule allows: the workers of one identity get
    their keys' count divided among them, differing by one at most, except that a worker
    can check only the keys it did not tune first (one that tuned most of them first
    checks all the others, and the rest are divided among its twins).  Within that, keys
    go to a worker on another node when ``nodes`` names one with room.  Keys with no twin
    are not re-checked."""
    count = len(identities)
    usable = [alive is None or alive[s] for s in range(count)]
    pinned: list[list[int]] = [[] for _ in identities]
    groups: dict[int, list[int]] = {}
    for slot in range(count):
        if usable[slot]:
            groups.setdefault(next(s for s in range(count) if identities[s] == identities[slot]), []).append(slot)
    for group in groups.values():
        keys = [i for i in sorted(first) if identities[first[i]] == identities[group[0]]
                and any(s != first[i] for s in group)]
        own = {s: sum(1 for i in keys if first[i] == s) for s in group}
        target = _even_targets(len(keys), group, {s: len(keys) - own[s] for s in group}, own)
        where = _place_checks(keys, first, group, target, nodes)
        for index, slot in where.items():
            pinned[slot].append(index)
    for chosen in pinned:
        chosen.sort()
    return pinned


def _even_targets(total: int, group: list[int], capacity: dict[int, int], own: dict[int, int]) -> dict[int, int]:
    """``total`` checks divided over ``group`` as evenly as each worker's ``capacity``
    (the keys it did not tune first) allows; an extra check goes to the workers that
    tuned the fewest keys first.  Any two workers tuned first on different workers can
    share every key, so capacities are the only limit and the targets can be met."""
    target: dict[int, int] = {}
    left, open_ = total, list(group)
    while open_:
        base = left // len(open_)
        full = [s for s in open_ if capacity[s] <= base]
        if not full:
            extra = left - base * len(open_)
            ranked = sorted(open_, key=lambda s: (own[s], s))
            target.update({s: base + (1 if n < extra else 0) for n, s in enumerate(ranked)})
            break
        for s in full:
            target[s] = capacity[s]
            left -= capacity[s]
            open_.remove(s)
    return target


def _place_checks(keys: list[int], first: dict[int, int], group: list[int], target: dict[int, int],
                  nodes: Sequence[str] | None) -> dict[int, int]:
    """Each key to a worker of ``group`` other than its first, at most ``target`` each:
    greedily (another node first), then moved along augmenting paths until no worker
    is over its target."""
    def allowed(index: int) -> list[int]:
        others = [s for s in group if s != first[index]]
        if nodes is None:
            return others
        return sorted(others, key=lambda s: nodes[s] == nodes[first[index]])  # another node first

    load = dict.fromkeys(group, 0)
    where: dict[int, int] = {}
    for index in keys:
        choices = allowed(index)
        room = [s for s in choices if load[s] < target[s]]
        elsewhere = [s for s in room if nodes is not None and nodes[s] != nodes[first[index]]]
        slot = min(elsewhere or room or choices, key=lambda s: (load[s], s))
        where[index] = slot
        load[slot] += 1
    for start in group:
        while load[start] > target[start]:
            parent: dict[int, tuple[int, int]] = {}
            frontier, end = [start], None
            while frontier and end is None:
                step = []
                for u in frontier:
                    for index in (i for i, s in where.items() if s == u):
                        for v in allowed(index):
                            if v != start and v not in parent:
                                parent[v] = (u, index)
                                if load[v] < target[v]:
                                    end = v
                                    break
                                step.append(v)
                        if end is not None:
                            break
                    if end is not None:
                        break
                frontier = step
            if end is None:
                break
            v = end
            while v != start:
                u, index = parent[v]
                where[index] = v
                load[v] += 1
                load[u] -= 1
                v = u
    return where


def disagreements(keys: Sequence[dict[str, Any]], found: dict[int, list[tuple[int, Artifact]]]) -> list[dict[str, Any]]:
    """The keys whose first two tunings chose different winners, in key order."""
    return [_disagreement(keys[i], pair) for i, pair in sorted(found.items())
            if len(pair) > 1 and not same_value(pair[0][1].winner.config, pair[1][1].winner.config)]


def _run_all(target: Callable[[int], None], count: int, stop: threading.Event | None = None) -> None:
    """Run ``target(slot)`` for every slot, one thread each.  The first failure sets
    ``stop`` so the other workers take no new key; every failure is reported."""
    if count == 1:
        target(0)
        return
    errors: list[BaseException] = []

    def guarded(slot: int) -> None:
        try:
            target(slot)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            errors.append(exc)
            if stop is not None:
                stop.set()

    threads = [threading.Thread(target=guarded, args=(slot,), name=f"flyconfigs-tune-{slot}") for slot in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if len(errors) == 1 or any(not isinstance(e, Exception) for e in errors):
        raise next((e for e in errors if not isinstance(e, Exception)), errors[0])
    if errors:
        lines = "; ".join(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}" for e in errors)
        raise TuneError(f"{len(errors)} workers failed: {lines}") from errors[0]


def _locked(progress: Progress, stop: threading.Event | None = None) -> Progress:
    """``progress`` called under a lock; once ``stop`` is set, every call raises
    :class:`KeyboardInterrupt` instead, at a point where nothing is half written.  A
    ``key`` event, which reports a key already written, is still passed on first."""
    lock = threading.Lock()

    def call(event: str, data: dict[str, Any]) -> None:
        stopped = stop is not None and stop.is_set()
        if stopped and event != "key":
            raise KeyboardInterrupt
        with lock:
            progress(event, data)
        if stopped:
            raise KeyboardInterrupt

    return call


def _disagreement(key: dict[str, Any], found: list[tuple[int, Artifact]]) -> dict[str, Any]:
    (_, a), (_, b) = found[0], found[1]
    ta, tb = a.winner.timing, b.winner.timing
    band = max(ta.noise, tb.noise, 0.01) if ta and tb else None
    return {
        "key": key,
        "devices": [a.device.ordinal, b.device.ordinal],
        "hosts": [a.provenance.host, b.provenance.host],
        "winners": [dict(a.winner.config), dict(b.winner.config)],
        "medians_us": [ta.median_us if ta else None, tb.median_us if tb else None],
        "within_noise": bool(ta and tb and band is not None and abs(ta.median_us - tb.median_us) <= band * min(ta.median_us, tb.median_us)),
    }


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
class _Plan:
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


def _plan(ctx: _Context, key: dict[str, Any], device: Device) -> _Plan:
    """The kernel's space for ``key`` on ``device`` (the default first, cut to the
    budget) and the rotation: copies enough for a replay to touch 3× the cache, up to
    the launches per replay (at most 200), so a key that moves under 1.5% of the cache
    per call, as at small M, is timed partly or wholly from the cache."""
    configs = candidate_configs(ctx.kernel, key, device, ctx.options.budget)
    traffic = ctx.kernel.traffic(key)
    final = rotation(traffic, device, ctx.options, ctx.options.final_target_us)
    screen = rotation(traffic, device, ctx.options, ctx.options.screen_target_us).launches
    return _Plan(configs, 0, traffic, final.copies, final.launches, min(screen, final.launches))


def _compile(ctx: _Context, key: dict[str, Any], plan: _Plan, device: Device) -> list[CheckResult]:
    """Every candidate compiled ahead; compile errors recorded, the rest still to verify."""
    errors = ctx.toolchain.compile_all(ctx.kernel, key, plan.configs, device)
    return [CheckResult("ok") if error is None else CheckResult("compile_error", error) for error in errors]


def _verify(ctx: _Context, key: dict[str, Any], plan: _Plan, status: list[CheckResult],
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


def _screen(worker: Worker, plan: _Plan, verified: list[int], options: TuneOptions) -> tuple[dict[int, Timing], dict[int, float]]:
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


def _select(ctx: _Context, key: dict[str, Any], plan: _Plan, status: list[CheckResult], worker: Worker) -> _Selected:
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


def _artifact(ctx: _Context, key: dict[str, Any], device: Device, plan: _Plan, status: list[CheckResult],
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
          plan: _Plan, options: TuneOptions) -> list[Timing]:
    try:
        raw = worker.time(configs, launches, samples, warmup, timeout=max(120.0, options.check_timeout_s),
                          hold=options.hold)
    except WorkerLost as lost:
        raise TuneError(f"timing verified candidates lost the worker: {lost.reason}") from None
    return [_timing(s, plan.traffic) for s in raw]


def _restart(worker: Worker, key: dict[str, Any], plan: _Plan, options: TuneOptions) -> None:
    worker.restart()
    worker.prepare(key, plan.copies, plan.traffic, timeout=options.check_timeout_s)
