"""Tuning on a Ray cluster: one long-lived actor per GPU on every node.

Each actor (``num_gpus=1``) holds a measuring worker process of its own
(:class:`~flyconfigs.tuner.worker.Worker`, restarted when a candidate faults it, so a
fault never takes the actor down), the toolchain and its compile cache.  The driver —
the process running ``flyconfigs tune --ray`` — hands out keys one at a time to
whichever actor is free, validates every artifact an actor sends back and alone writes
``--out`` through the same atomic emit as a local run.  An actor or a node lost mid-run
puts its unfinished key back in the queue and the run completes on the others; a
driver killed mid-run is resumed with ``--resume``, which redoes only unfinished keys.

Only GPUs whose device identity matches the target are used; the report names every
GPU left out and why.  Ray is an optional dependency (``flyconfigs[ray]``).
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flyconfigs.errors import ArtifactError, TuneError
from flyconfigs.kernels.plugin import tunable_kernel
from flyconfigs.registry.device import DeviceQuery
from flyconfigs.schema.load import loads_artifact
from flyconfigs.schema.models import Artifact, Device, DeviceIdentity
from flyconfigs.tuner import emit
from flyconfigs.tuner.key import KeyTuner
from flyconfigs.tuner.options import KeyResult, Progress, TuneOptions
from flyconfigs.tuner.run import TuneReport, add_seconds, disagreements, spread_cross_checks

__all__ = ["GPUActor", "identity_matches", "reassign_check", "tune_fleet"]

START_TIMEOUT_S = 600.0
"""How long the driver waits for every actor to start (measuring process and GPU context)."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise TuneError("--ray needs Ray: pip install 'flyconfigs[ray]'") from None
    return ray


def identity_matches(target: DeviceQuery, identity: DeviceIdentity) -> bool:
    """Whether ``identity`` is the device ``target`` asks for: the same vendor and arch,
    and the same product, compute units and features where the target names them."""
    return (
        target.vendor == identity.vendor
        and target.arch == identity.arch
        and (target.product is None or target.product == identity.product)
        and (target.compute_units is None or target.compute_units == identity.compute_units)
        and (target.features is None or tuple(target.features) == tuple(identity.features))
    )


class GPUActor:
    """What runs in each Ray actor: one GPU, its measuring worker, toolchain and cache.

    Built by Ray on the node it was placed on; the GPU is the one Ray assigned it (its
    physical index on the node is what artifacts record as the ordinal).  A failure to
    start is kept and reported by :meth:`describe` instead of killing the actor, so the
    driver can say why that GPU was left out."""

    def __init__(self, kernel: str, backend: str | None, options: TuneOptions, command: list[str],
                 compile_processes: int, measurer_options: Mapping[str, Any]) -> None:
        import ray

        from flyconfigs.tuner.worker import Worker

        self.node = ray.get_runtime_context().get_node_id()
        self.host = socket.gethostname() or "unknown"
        ids = ray.get_gpu_ids()
        self.gpu = int(ids[0]) if ids else 0
        self.error: str | None = None
        self.worker: Worker | None = None
        self.toolchain: Any = None
        self.tuner: KeyTuner | None = None
        try:
            decl = tunable_kernel(kernel)
            if backend == "simulated":
                from flyconfigs.tuner.simulated import SimulatedToolchain

                self.worker = Worker("flyconfigs.tuner.simulated:SimulatedMeasurer",
                                     {**measurer_options, "ordinal": self.gpu, "kernel": kernel})
                self.toolchain = SimulatedToolchain()
            else:
                from flyconfigs.tuner.toolchain import GPUToolchain

                # Ray makes the assigned GPU the only one this process sees: ordinal 0.
                self.worker = Worker("flyconfigs.tuner.measure_gpu:GPUMeasurer",
                                     {**measurer_options, "kernel": kernel, "backend": backend, "ordinal": 0})
                vendor = Device.model_validate(self.worker.device).vendor
                self.toolchain = GPUToolchain("hip" if vendor == "amd" else "cuda", compile_processes)
            device = Device.model_validate({**self.worker.device, "ordinal": self.gpu})
            self.tuner = KeyTuner(decl, self.toolchain, self.worker, device, options, command=command)
        except Exception as exc:  # noqa: BLE001 - reported by describe(); the driver leaves this GPU out
            self.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            self.close()

    def describe(self) -> dict[str, Any]:
        """Where this actor runs and on what: node, host, GPU, device, versions (or the
        error that stopped it from starting)."""
        out: dict[str, Any] = {"node": self.node, "host": self.host, "gpu": self.gpu, "error": self.error,
                               "pid": os.getpid()}
        if self.tuner is not None:
            out.update(device=self.tuner.device.model_dump(mode="json"), versions=self.tuner.versions,
                       source_sha256=self.tuner.source_sha)
        return out

    def tune(self, key: dict[str, Any]) -> tuple[KeyResult, bytes]:
        """Tune one key; the artifact as its canonical JSON bytes (the driver writes it)."""
        if self.tuner is None:
            raise TuneError(f"this GPU actor did not start: {self.error}")
        result, artifact = self.tuner.tune(key)
        return result, artifact.to_json_bytes()

    def restarts(self) -> int:
        """How many times the measuring worker was restarted after a fault."""
        return self.worker.restarts if self.worker is not None else 0

    def close(self) -> None:
        """Stop the measuring worker and the toolchain's processes."""
        if self.toolchain is not None:
            getattr(self.toolchain, "close", lambda: None)()
        if self.worker is not None:
            self.worker.close()


@dataclass(eq=False)
class _Slot:
    """The driver's view of one GPU actor."""

    actor: Any
    node: str
    host: str
    gpu: int
    device: Device
    versions: dict[str, str]
    source_sha: str
    alive: bool = True

    @property
    def name(self) -> str:
        return f"{self.host} GPU {self.gpu} (node {self.node[:8]})"


@dataclass
class _Run:
    """The state of one fleet run on the driver."""

    kernel: str
    keys: list[dict[str, Any]]
    out: Path
    options: TuneOptions
    notify: Progress
    report: TuneReport
    slots: list[_Slot]
    results: dict[int, KeyResult] = field(default_factory=dict)
    winners: dict[int, list[tuple[int, Artifact]]] = field(default_factory=dict)


def _connect(ray: Any, address: str | None, local_gpus: Callable[[], int]) -> bool:
    """Connect to the cluster at ``address`` (``auto``: the running one), or start a
    local one with this machine's GPUs when ``address`` is None; True when this call
    initialised Ray (and so must shut it down)."""
    if ray.is_initialized():
        return False
    common = {"logging_level": "WARNING", "log_to_driver": False, "configure_logging": True}
    try:
        if address is None:
            ray.init(address="local", num_gpus=local_gpus(), include_dashboard=False, **common)
        else:
            ray.init(address=address, **common)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise TuneError(f"cannot connect to {where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    return True


def _start_actors(ray: Any, kernel: str, backend: str | None, options: TuneOptions, command: list[str],
                  measurer_options: Mapping[str, Any], start_timeout: float) -> tuple[list[_Slot], list[str], list[Any]]:
    """One actor per GPU of every live node, pinned to its node; the slots that started,
    a reason for each GPU that did not, and every actor handle (to kill at the end)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(num_gpus=1, num_cpus=0, max_restarts=0, max_task_retries=0)(GPUActor)
    actors: list[Any] = []
    for node in ray.nodes():
        gpus = int(node.get("Resources", {}).get("GPU", 0)) if node.get("Alive") else 0
        cpus = int(node.get("Resources", {}).get("CPU", 1))
        for _ in range(gpus):
            actors.append(remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
                          .remote(kernel, backend, options, command, max(1, cpus // gpus), dict(measurer_options)))
    if not actors:
        raise TuneError("the Ray cluster has no GPU: no node offers a 'GPU' resource")
    pending = {actor.describe.remote(): actor for actor in actors}
    ready, late = ray.wait(list(pending), num_returns=len(pending), timeout=start_timeout)
    slots: list[_Slot] = []
    left_out: list[str] = []
    for ref in ready:
        try:
            info = ray.get(ref)
        except ray.exceptions.RayError as exc:
            left_out.append(f"a GPU actor: could not start ({_first_line(exc)})")
            continue
        where = f"{info['host']} GPU {info['gpu']} (node {info['node'][:8]})"
        if info["error"] is not None:
            left_out.append(f"{where}: could not start ({info['error']})")
            continue
        slots.append(_Slot(pending[ref], info["node"], info["host"], info["gpu"], Device.model_validate(info["device"]),
                           info["versions"], info["source_sha256"]))
    if late:
        left_out.append(f"{len(late)} GPU actors did not start within {start_timeout:.0f} s (GPUs taken by other work?)")
    slots.sort(key=lambda s: (s.host, s.node, s.gpu))
    return slots, left_out, actors


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1].strip()[:300] if text else type(exc).__name__


def _choose(slots: list[_Slot], target: DeviceQuery | None) -> tuple[list[_Slot], list[str], str]:
    """The slots whose device is the target (by default the identity most GPUs share),
    one line per node for the GPUs left out, and the target's description."""
    if target is not None:
        wanted = target.describe()
        chosen = [s for s in slots if identity_matches(target, s.device.identity)]
    else:
        counts: dict[str, int] = {}
        for s in slots:
            counts[s.device.identity.describe()] = counts.get(s.device.identity.describe(), 0) + 1
        wanted = min(counts, key=lambda d: (-counts[d], d)) if counts else "?"
        chosen = [s for s in slots if s.device.identity.describe() == wanted]
    others: dict[tuple[str, str, str], list[int]] = {}
    for s in slots:
        if s not in chosen:
            others.setdefault((s.host, s.node, s.device.identity.describe()), []).append(s.gpu)
    lines = [f"{host} (node {node[:8]}): GPU {', '.join(map(str, sorted(gpus)))} is {what}, not the target {wanted}"
             for (host, node, what), gpus in sorted(others.items())]
    return chosen, lines, wanted


def tune_fleet(
    kernel: str,
    keys: Sequence[dict[str, Any]],
    out: Path,
    backend: str | None,
    options: TuneOptions | None = None,
    progress: Progress | None = None,
    cross_check: bool = False,
    address: str | None = None,
    target: DeviceQuery | None = None,
    measurer_options: Mapping[str, Any] | None = None,
    start_timeout: float = START_TIMEOUT_S,
) -> TuneReport:
    """Tune ``keys`` of ``kernel`` (an entry-point name) on every GPU of a Ray cluster
    whose device is ``target`` (default: the device most of its GPUs are); one artifact
    per key in ``out``, written by this process only.

    ``address``: a cluster to join (``auto`` for the running one), or None to start a
    local one with this machine's GPUs.  ``measurer_options`` go to every measuring
    worker (the test backend's speeds, behaviours and delays).  With ``cross_check``
    every key is re-tuned on another GPU of the same identity, on another node when
    there is one, the checks spread evenly.

    Raises :class:`TuneError` when Ray is missing, the cluster cannot be reached, no GPU
    matches, a key fails (after the keys in flight have finished and been written) or
    every GPU is lost; the artifacts written so far stay (``--resume`` goes on from them)."""
    ray = _ray()
    options = options or TuneOptions()
    decl = tunable_kernel(kernel)
    emit.check_writable(out)
    checked = [decl.check_key(k) for k in keys]
    notify = progress or (lambda event, data: None)
    started = time.perf_counter()

    def local_gpus() -> int:
        if backend == "simulated":
            from flyconfigs.tuner.simulated import SIMULATED_ORDINALS

            return len(SIMULATED_ORDINALS)
        from flyconfigs.gpu import device_count

        return device_count(backend)

    owns_ray = _connect(ray, address, local_gpus)
    actors: list[Any] = []
    try:
        slots, left_out, actors = _start_actors(ray, kernel, backend, options, emit.command_line(),
                                                measurer_options or {}, start_timeout)
        chosen, not_target, wanted = _choose(slots, target)
        left_out = not_target + left_out
        for actor in actors:
            if not any(actor is s.actor for s in chosen):
                ray.kill(actor)
        if not chosen:
            found = "; ".join(left_out) or "no GPU started"
            raise TuneError(f"no GPU of the Ray cluster is the target {wanted}: {found}")
        report = TuneReport(chosen[0].device, workers=[s.name for s in chosen], left_out=left_out)
        run = _Run(kernel, checked, out, options, notify, report, chosen)
        notify("start", {"keys": len(checked), "device": wanted, "workers": len(chosen),
                         "nodes": len({s.node for s in chosen}), "left_out": left_out})
        _tune_all(ray, run)
        if cross_check:
            _cross_check(ray, run)
            report.disagreements = disagreements(checked, run.winners)
        report.results = [run.results[i] for i in sorted(run.results)]
        report.worker_restarts = sum(ray.get([s.actor.restarts.remote() for s in chosen if s.alive]))
        report.seconds["total"] = time.perf_counter() - started
        return report
    finally:
        for actor in actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone with its node
                pass
        if owns_ray:
            ray.shutdown()


def _lost(ray: Any) -> tuple[type[BaseException], ...]:
    e = ray.exceptions
    return (e.RayActorError, e.WorkerCrashedError, e.NodeDiedError, e.ObjectLostError, e.OwnerDiedError)


def _drive(ray: Any, run: _Run, take: Callable[[_Slot], int | None], lost_key: Callable[[int, _Slot], None],
           done: Callable[[int, _Slot, KeyResult, Artifact], None]) -> None:
    """Keep every live slot busy with the key ``take`` gives it until none is left.
    A slot whose actor is lost is dropped and its key handed to ``lost_key``; the first
    failing key stops new dispatches, the keys in flight finish, then it is raised."""
    busy: dict[Any, tuple[_Slot, int]] = {}
    idle = deque(s for s in run.slots if s.alive)
    failure: TuneError | None = None
    lost_errors = _lost(ray)
    while True:
        while failure is None and idle:
            slot = idle.popleft()
            index = take(slot)
            if index is None:
                continue
            ref = slot.actor.tune.remote(run.keys[index])
            busy[ref] = (slot, index)
            run.notify("dispatch", {"key": run.keys[index], "worker": slot.name, "actor": slot.actor})
        if not busy:
            break
        (ref,), _ = ray.wait(list(busy), num_returns=1)
        slot, index = busy.pop(ref)
        try:
            result, raw = ray.get(ref)
        except lost_errors as exc:
            slot.alive = False
            run.report.lost.append(f"{slot.name}: {_first_line(exc)}")
            run.notify("lost", {"worker": slot.name, "key": run.keys[index], "reason": _first_line(exc)})
            lost_key(index, slot)
            if failure is None:
                idle.extend(s for s in run.slots if s.alive and s not in idle and all(b[0] is not s for b in busy.values()))
            continue
        except ray.exceptions.RayTaskError as exc:
            failure = failure or TuneError(f"{slot.name} failed on {run.keys[index]}: {_first_line(exc)}")
            continue
        try:
            artifact = loads_artifact(raw, f"the artifact {slot.name} sent for {run.keys[index]}")
        except ArtifactError as exc:
            failure = failure or TuneError(str(exc))
            continue
        done(index, slot, result, artifact)
        idle.append(slot)
    if failure is not None:
        raise failure


def _tune_all(ray: Any, run: _Run) -> None:
    """Every key once, handed out dynamically; resumed keys skipped; lost keys re-queued."""
    todo = deque(range(len(run.keys)))
    index_of = {id(s): n for n, s in enumerate(run.slots)}

    def take(slot: _Slot) -> int | None:
        while todo:
            index = todo.popleft()
            key = run.keys[index]
            if run.options.resume and emit.already_tuned(run.out, run.kernel, key, slot.device.identity, slot.source_sha,
                                                         slot.versions):
                run.results[index] = KeyResult(key, None, skipped=True)
                run.notify("skip", {"key": key})
                continue
            return index
        return None

    def done(index: int, slot: _Slot, result: KeyResult, artifact: Artifact) -> None:
        result.path = emit.write_artifact(run.out, artifact)
        add_seconds(run.report, result)
        run.results[index] = result
        run.winners.setdefault(index, []).append((index_of[id(slot)], artifact))
        run.notify("key", {"key": run.keys[index], "result": result, "worker": slot.name})

    _drive(ray, run, take, lambda index, slot: todo.appendleft(index), done)
    missing = [run.keys[i] for i in range(len(run.keys)) if i not in run.results]
    if missing:
        raise TuneError(f"every GPU of the run was lost; {len(missing)} keys not tuned (run again with --resume): "
                        + ", ".join(map(str, missing[:5])) + (" …" if len(missing) > 5 else ""))


def reassign_check(twins: Sequence[int], given: Sequence[int], elsewhere: Sequence[bool]) -> int | None:
    """The twin a lost worker's cross-check moves to: the one given the fewest checks
    so far, on another node than the key's first worker where that ties; ``None`` when
    no twin is left (the key is not re-checked)."""
    if not twins:
        return None
    return min(twins, key=lambda n: (given[n], not elsewhere[n], n))


def _cross_check(ray: Any, run: _Run) -> None:
    """Each tuned key re-tuned on a twin GPU (another node first), spread evenly; a key
    whose checker is lost goes to another twin, or is not re-checked if none is left."""
    slots = run.slots
    identities = [s.device.identity for s in slots]

    def alive_twins(index: int) -> list[int]:
        first = run.winners[index][0][0]
        return [n for n, s in enumerate(slots) if s.alive and n != first and identities[n] == identities[first]]

    first = {i: found[0][0] for i, found in run.winners.items()}
    pinned = spread_cross_checks(first, identities, [s.node for s in slots], [s.alive for s in slots])
    queues = {id(s): deque(pinned[n]) for n, s in enumerate(slots)}
    index_of = {id(s): n for n, s in enumerate(slots)}
    # Checks each slot was given in all (done, in flight and queued): a lost slot's
    # checks go to the twins given the fewest, so the spread stays even after a loss.
    given = [len(p) for p in pinned]

    def take(slot: _Slot) -> int | None:
        queue = queues[id(slot)]
        return queue.popleft() if queue else None

    def lost_key(index: int, slot: _Slot) -> None:
        given[index_of[id(slot)]] = 0
        for moved in [index, *queues[id(slot)]]:
            home = slots[run.winners[moved][0][0]].node
            chosen = reassign_check(alive_twins(moved), given, [s.node != home for s in slots])
            if chosen is not None:
                queues[id(slots[chosen])].append(moved)
                given[chosen] += 1
        queues[id(slot)].clear()

    def done(index: int, slot: _Slot, result: KeyResult, artifact: Artifact) -> None:
        add_seconds(run.report, result)
        run.winners[index].append((index_of[id(slot)], artifact))
        run.notify("cross-check", {"key": run.keys[index], "worker": slot.name})

    _drive(ray, run, take, lost_key, done)
