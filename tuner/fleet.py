"""Tuning on a Ray cluster: one long-lived actor per GPU on every node, the keys handed
out by the same scheduler as a local run (:mod:`flyconfigs.tuner.scheduler`).

Each actor (``num_gpus=1``) holds a measuring worker process of its own
(:class:`~flyconfigs.tuner.worker.Worker`, restarted when a candidate faults it, so a
fault never takes the actor down), the toolchain and its compile cache.  The driver —
the process running ``flyconfigs tune --ray`` — hands out keys one at a time to
whichever actor is free, validates every artifact an actor sends back and alone writes
``--out`` through the same atomic emit as a local run.  An actor or a node lost mid-run
puts its unfinished key back in the queue and the run completes on the others; a
driver stopped by a signal reports what it finished, and one killed mid-run is resumed
with ``--resume``, which redoes only unfinished keys.

Ray is kept to its place: an address that does not answer fails within
:data:`CONNECT_TIMEOUT_S`, what Ray prints for the driver goes to stderr (stdout is the
caller's), the caller's SIGTERM handler survives ``ray.init``, and a local cluster
started here authenticates with a token that lives in this process's environment, never
in ``~/.ray``.

Only GPUs whose device identity matches the target are used; the report names every
GPU left out and why.  Ray is an optional dependency (``flyconfigs[ray]``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flyconfigs.errors import ArtifactError, TuneError
from flyconfigs.kernels.plugin import tunable_kernel
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema.load import loads_artifact
from flyconfigs.schema.models import Device, DeviceIdentity
from flyconfigs.tuner import emit
from flyconfigs.tuner.key import KeyTuner
from flyconfigs.tuner.options import KeyResult, Progress, TuneOptions
from flyconfigs.tuner.scheduler import POLL_S, Lost, Outcome, Scheduler, Slot, Tuned, TuneReport

__all__ = ["CONNECT_TIMEOUT_S", "START_TIMEOUT_S", "FleetRequest", "GPUActor", "identity_matches", "ray_address",
           "tune_fleet"]

START_TIMEOUT_S = 600.0
"""How long the driver waits for every actor to start (measuring process and GPU context)."""
CONNECT_TIMEOUT_S = 10.0
"""How long the driver waits for a cluster's address to answer before it gives up."""
_TOKEN_VARIABLES = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@dataclass(frozen=True)
class FleetRequest:
    """What a fleet run tunes and where.

    ``kernel`` is an entry-point name and ``keys`` its keys; ``out`` the folder the
    driver writes.  ``address``: a cluster to join (``auto`` for the running one,
    ``HOST:PORT``, ``ray://HOST:PORT``), or None to start a local one with this
    machine's GPUs; ``target`` the device to tune for (default: the device most of the
    cluster's GPUs are).  ``measurer_options`` go to every measuring worker (the test
    backend's speeds, behaviours and delays).  With ``cross_check`` every key is
    re-tuned on another GPU of the same identity, on another node when there is one."""

    kernel: str
    keys: Sequence[dict[str, Any]]
    out: Path
    backend: str | None = None
    options: TuneOptions = TuneOptions()
    cross_check: bool = False
    address: str | None = None
    target: DeviceQuery | None = None
    measurer_options: Mapping[str, Any] = field(default_factory=dict)
    start_timeout: float = START_TIMEOUT_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))  # frozen means the keys too


def ray_address(text: str) -> str | None:
    """The cluster address ``--ray`` names: None for ``local`` (start one here),
    ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT`` as given.  Raises
    :class:`TuneError` naming the value for anything else."""
    if text == "local":
        return None
    if text == "auto" or _host_port(text) is not None:
        return text
    raise TuneError(f"--ray takes 'auto', HOST:PORT or ray://HOST:PORT (alone: a local cluster); got {text!r}")


def _host_port(address: str) -> tuple[str, int] | None:
    """The host and port of ``HOST:PORT`` or ``ray://HOST:PORT``, or None."""
    rest = address.removeprefix("ray://")
    try:
        parts = urllib.parse.urlsplit(f"//{rest}")
        port = parts.port
    except ValueError:  # a port that is not a number from 0 to 65535
        return None
    if not parts.hostname or port is None or port == 0 or parts.path or parts.query or parts.fragment \
            or parts.username is not None or "/" in rest:
        return None
    return parts.hostname, port


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
                from flyconfigs.gpu import backend_for_vendor
                from flyconfigs.tuner.toolchain import GPUToolchain

                # Ray makes the assigned GPU the only one this process sees: ordinal 0.
                self.worker = Worker("flyconfigs.tuner.measure_gpu:GPUMeasurer",
                                     {**measurer_options, "kernel": kernel, "backend": backend, "ordinal": 0})
                vendor = Device.model_validate(self.worker.device).vendor
                self.toolchain = GPUToolchain(backend_for_vendor(vendor), compile_processes)
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
class _StartedActor:
    """The driver's view of one GPU actor that started."""

    actor: Any
    node: str
    host: str
    gpu: int
    device: Device
    versions: dict[str, str]
    source_sha: str

    @property
    def name(self) -> str:
        return f"{self.host} GPU {self.gpu} (node {self.node[:8]})"


class _RaySlots:
    """The chosen GPU actors as the scheduler's slots: a key is a remote call, its
    outcome the artifact the actor sent back (validated here), a lost actor or node,
    or the actor's failure."""

    def __init__(self, ray: Any, actors: Sequence[_StartedActor]) -> None:
        self._ray = ray
        self._actors = list(actors)
        self.slots = [Slot(a.name, a.node, a.device, a.versions, a.source_sha, extra={"actor": a.actor}) for a in actors]
        self._busy: dict[Any, tuple[int, dict[str, Any]]] = {}
        self._abandoned: set[int] = set()
        e = ray.exceptions
        self._lost = (e.RayActorError, e.WorkerCrashedError, e.NodeDiedError, e.ObjectLostError, e.OwnerDiedError)

    def start(self, slot: int, key: dict[str, Any]) -> None:
        self._busy[self._actors[slot].actor.tune.remote(key)] = (slot, key)

    def wait(self, timeout: float) -> tuple[int, Outcome] | None:
        ready, _ = self._ray.wait(list(self._busy), num_returns=1, timeout=timeout)
        if not ready:
            return None
        slot, key = self._busy.pop(ready[0])
        name = self.slots[slot].name
        try:
            result, raw = self._ray.get(ready[0])
        except self._lost as exc:
            return slot, Lost(_first_line(exc))
        except self._ray.exceptions.RayTaskError as exc:
            return slot, TuneError(f"{name} failed on {key}: {_first_line(exc)}")
        try:
            return slot, Tuned(result, loads_artifact(raw, f"the artifact {name} sent for {key}"))
        except ArtifactError as exc:
            return slot, TuneError(str(exc))

    def cancel(self) -> None:
        # A remote call cannot be stopped at a candidate: the keys in flight are
        # abandoned, and their actors killed when the run ends.
        self._abandoned = {slot for slot, _ in self._busy.values()}
        self._busy.clear()

    def restarts(self) -> int:
        count = 0
        for n, slot in enumerate(self.slots):
            if not slot.alive or n in self._abandoned:  # its actor would answer only after the abandoned key
                continue
            try:
                count += int(self._ray.get(self._actors[n].actor.restarts.remote()))
            except self._lost:
                continue
        return count


@contextlib.contextmanager
def _connected(ray: Any, address: str | None, local_gpus: Callable[[], int]) -> Iterator[None]:
    """Within the block Ray is connected: to the cluster at ``address`` (``auto``: the
    running one), or to a local one started with this machine's GPUs when ``address`` is
    None.  A connection the caller made is used and left open; one made here is shut
    down at the end.  Raises :class:`TuneError` when the cluster cannot be reached."""
    if ray.is_initialized():
        yield
        return
    if address is not None and address != "auto":
        _answers(address, CONNECT_TIMEOUT_S)
    with _token_for(starts_cluster=address is None):
        _init(ray, address, local_gpus)
        try:
            yield
        finally:
            ray.shutdown()


def _answers(address: str, timeout: float) -> None:
    """Raise :class:`TuneError` unless something accepts a connection at ``address``
    within ``timeout`` seconds.  Ray itself retries an address that does not answer
    for many minutes before it gives up."""
    found = _host_port(address)
    if found is None:
        raise TuneError(f"cannot connect to the Ray cluster at {address}: not HOST:PORT")
    try:
        socket.create_connection(found, timeout=timeout).close()
    except OSError as exc:
        reason = f"no answer within {timeout:.0f} s" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise TuneError(f"cannot connect to the Ray cluster at {address}: {reason}") from None


def _init(ray: Any, address: str | None, local_gpus: Callable[[], int]) -> None:
    common = {"logging_level": "WARNING", "log_to_driver": False, "configure_logging": True}
    main = threading.current_thread() is threading.main_thread()
    on_term = signal.getsignal(signal.SIGTERM) if main else None
    try:
        if address is None:
            ray.init(address="local", num_gpus=local_gpus(), include_dashboard=False, **common)
        else:
            ray.init(address=address, **common)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise TuneError(f"cannot connect to {where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    finally:
        if on_term is not None:
            # ray.init installs a SIGTERM handler that exits at once (status 15, no
            # summary, nothing reported); the caller's own handler stops the run cleanly.
            signal.signal(signal.SIGTERM, on_term)


@contextlib.contextmanager
def _token_for(starts_cluster: bool) -> Iterator[None]:
    """A local cluster started here gets its authentication token from this process's
    environment: Ray would otherwise write one to ``~/.ray/auth_token``, which then
    switches every later cluster of this user to token authentication.  A token the user
    configured is left alone; the environment is restored at the end."""
    saved = {name: os.environ.get(name) for name in ("RAY_AUTH_MODE", *_TOKEN_VARIABLES)}
    if starts_cluster and not any(saved[name] for name in _TOKEN_VARIABLES):
        os.environ["RAY_AUTH_TOKEN"] = _process_token()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@functools.cache
def _process_token() -> str:
    # One token for the process's lifetime: Ray's token loader keeps the first it reads.
    return secrets.token_hex(32)


def _local_gpus(backend: str | None) -> int:
    if backend == "simulated":
        from flyconfigs.tuner.simulated import SIMULATED_ORDINALS

        return len(SIMULATED_ORDINALS)
    from flyconfigs.gpu import device_count

    return device_count(backend)


def _start_actors(ray: Any, request: FleetRequest, command: list[str],
                  stop: threading.Event) -> tuple[list[_StartedActor], list[str], list[Any]]:
    """One actor per GPU of every live node, pinned to its node; the actors that
    started, a reason for each GPU that did not, and every actor handle (to kill at the
    end).  A set ``stop`` raises :class:`KeyboardInterrupt`."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(num_gpus=1, num_cpus=0, max_restarts=0, max_task_retries=0)(GPUActor)
    actors: list[Any] = []
    for node in ray.nodes():
        gpus = int(node.get("Resources", {}).get("GPU", 0)) if node.get("Alive") else 0
        cpus = int(node.get("Resources", {}).get("CPU", 1))
        for _ in range(gpus):
            actors.append(remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
                          .remote(request.kernel, request.backend, request.options, command, max(1, cpus // gpus),
                                  dict(request.measurer_options)))
    if not actors:
        raise TuneError("the Ray cluster has no GPU: no node offers a 'GPU' resource")
    pending = {actor.describe.remote(): actor for actor in actors}
    ready: list[Any] = []
    late = list(pending)
    deadline = time.monotonic() + request.start_timeout
    while late and time.monotonic() < deadline:
        if stop.is_set():
            raise KeyboardInterrupt
        done, late = ray.wait(late, num_returns=len(late), timeout=min(POLL_S, max(0.0, deadline - time.monotonic())))
        ready.extend(done)
    started: list[_StartedActor] = []
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
        started.append(_StartedActor(pending[ref], info["node"], info["host"], info["gpu"],
                                     Device.model_validate(info["device"]), info["versions"], info["source_sha256"]))
    if late:
        left_out.append(f"{len(late)} GPU actors did not start within {request.start_timeout:.0f} s "
                        "(GPUs taken by other work?)")
    started.sort(key=lambda s: (s.host, s.node, s.gpu))
    return started, left_out, actors


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1].strip()[:300] if text else type(exc).__name__


def _pick_target(started: list[_StartedActor], target: DeviceQuery | None) -> tuple[list[_StartedActor], list[str], str]:
    """The actors whose device is the target (by default the identity most GPUs share),
    one line per node for the GPUs left out, and the target's description."""
    if target is not None:
        wanted = target.describe()
        chosen = [s for s in started if identity_matches(target, s.device.identity)]
    else:
        counts: dict[str, int] = {}
        for s in started:
            counts[s.device.identity.describe()] = counts.get(s.device.identity.describe(), 0) + 1
        wanted = min(counts, key=lambda d: (-counts[d], d)) if counts else "?"
        chosen = [s for s in started if s.device.identity.describe() == wanted]
    others: dict[tuple[str, str, str], list[int]] = {}
    for s in started:
        if s not in chosen:
            others.setdefault((s.host, s.node, s.device.identity.describe()), []).append(s.gpu)
    lines = [f"{host} (node {node[:8]}): GPU {', '.join(map(str, sorted(gpus)))} is {what}, not the target {wanted}"
             for (host, node, what), gpus in sorted(others.items())]
    return chosen, lines, wanted


def tune_fleet(request: FleetRequest, progress: Progress | None = None, stop: threading.Event | None = None) -> TuneReport:
    """Tune ``request.keys`` on every GPU of a Ray cluster whose device is the target;
    one artifact per key in ``request.out``, written by this process only.

    Setting ``stop`` (a signal handler's way) ends the run at once: keys in flight are
    abandoned, and the report says so (``interrupted``, ``not_reached``) as a local run's
    does.  While it runs, what Ray prints for this process goes to stderr.

    Raises :class:`TuneError` when Ray is missing, the cluster cannot be reached within
    :data:`CONNECT_TIMEOUT_S`, no GPU matches, a key fails (after the keys in flight
    have finished and been written) or every GPU is lost; the artifacts written so far
    stay (``--resume`` goes on from them)."""
    ray = _ray()
    decl = tunable_kernel(request.kernel)
    emit.check_writable(request.out)
    checked = [decl.check_key(k) for k in request.keys]
    started = time.perf_counter()
    scheduler = Scheduler(decl.name, checked, request.out, request.options, request.cross_check, progress, stop)
    # Ray prints the cluster's error messages (a worker died, a node was marked dead)
    # on the driver's stdout, which belongs to the caller (a --json object, a pipe).
    with contextlib.redirect_stdout(sys.stderr), _connected(ray, request.address, lambda: _local_gpus(request.backend)):
        actors: list[Any] = []
        try:
            started_actors, left_out, actors = _start_actors(ray, request, emit.command_line(), scheduler.stop)
            chosen, not_target, wanted = _pick_target(started_actors, request.target)
            for actor in actors:
                if not any(actor is s.actor for s in chosen):
                    ray.kill(actor)
            if not chosen:
                found = "; ".join(not_target + left_out) or "no GPU started"
                raise TuneError(f"no GPU of the Ray cluster is the target {wanted}: {found}")
            report = scheduler.run(_RaySlots(ray, chosen), device=wanted, left_out=not_target + left_out)
        finally:
            for actor in actors:
                try:
                    ray.kill(actor)
                except Exception:  # noqa: BLE001 - already gone with its node
                    pass
    report.seconds["total"] = time.perf_counter() - started
    return report
