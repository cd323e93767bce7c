"""A tuning session as ``flyconfigs tune`` runs one: the kernel and keys checked, one
measuring worker per device ordinal for the backend asked (the test backend's simulated
devices included), the toolchain for the devices' vendor, the run, and its summary.
Terminal output is the caller's: progress arrives through the callback."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flyconfigs.errors import InvalidKeyError, TuneError
from flyconfigs.kernels.plugin import key_presets, tunable_kernel
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema.models import Device
from flyconfigs.tuner.grid import parse_grids
from flyconfigs.tuner.options import Progress, TuneOptions
from flyconfigs.tuner.run import tune
from flyconfigs.tuner.scheduler import TuneReport
from flyconfigs.tuner.worker import Worker, available_cpus

__all__ = ["RayFleet", "SessionRequest", "SessionResult", "device_ordinals", "run_session"]


@dataclass(frozen=True)
class SessionResult:
    """The run's report and its summary as plain JSON data."""

    report: TuneReport
    summary: dict[str, Any]


def device_ordinals(text: str, backend: str | None) -> list[int]:
    """``all`` (every device the backend sees) or ordinals like ``0,1,1``;
    :class:`InvalidKeyError` naming the bad value."""
    if text == "all":
        if backend == "simulated":
            from flyconfigs.tuner.simulated import SIMULATED_ORDINALS

            return list(SIMULATED_ORDINALS)
        from flyconfigs.gpu import device_count

        count = device_count(backend)
        if count < 1:
            raise TuneError("--devices all: no GPU found")
        return list(range(count))
    parts = text.split(",")
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise InvalidKeyError(f"--devices takes 'all' or GPU ordinals like 0,1,2; got {text!r}")
    return [int(p) for p in parts]


def _workers(kernel: str, backend: str | None, ordinals: Sequence[int]) -> tuple[list[Worker], Any]:
    workers: list[Worker] = []
    if backend == "simulated":
        from flyconfigs.tuner.simulated import SimulatedToolchain

        workers = [Worker("flyconfigs.tuner.simulated:SimulatedMeasurer", {"ordinal": o, "kernel": kernel})
                   for o in ordinals]
        return workers, SimulatedToolchain()
    from flyconfigs.gpu import backend_for_vendor
    from flyconfigs.tuner.toolchain import GPUToolchain

    try:
        for ordinal in ordinals:
            workers.append(Worker("flyconfigs.tuner.measure_gpu:GPUMeasurer",
                                  {"kernel": kernel, "backend": backend, "ordinal": ordinal}))
        vendor = Device.model_validate(workers[0].device).vendor
    except BaseException:
        for worker in workers:
            worker.close()
        raise
    return workers, GPUToolchain(backend_for_vendor(vendor), available_cpus())


@dataclass(frozen=True)
class RayFleet:
    """Tune on a Ray cluster instead of this host's GPUs: ``address`` None starts a
    local cluster with this machine's GPUs, ``auto`` joins the running one, else the
    cluster at that address; ``target`` the device to tune for (default: the device
    most of the cluster's GPUs are)."""

    address: str | None = None
    target: DeviceQuery | None = None


@dataclass(frozen=True)
class SessionRequest:
    """What a ``flyconfigs tune`` session tunes and where.

    ``kernel`` is an entry-point name, ``grids`` its key grids (``M=1,16 N=4096``, a
    preset's name or ``@FILE``), ``extra`` values for axes a grid does not name.  The
    keys are tuned into ``out`` on the GPUs ``ordinals`` of ``backend`` (default: the
    GPU found), or on every matching GPU of a Ray cluster with ``fleet``."""

    kernel: str
    grids: Sequence[str]
    out: Path
    backend: str | None = None
    ordinals: Sequence[int] = (0,)
    extra: Mapping[str, Sequence[Any]] | None = None
    options: TuneOptions = TuneOptions()
    cross_check: bool = False
    fleet: RayFleet | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "grids", tuple(self.grids))  # frozen means the lists too
        object.__setattr__(self, "ordinals", tuple(self.ordinals))


def run_session(request: SessionRequest, progress: Progress | None = None,
                stop: threading.Event | None = None) -> SessionResult:
    """Run ``request``; progress arrives through ``progress``.  Setting ``stop`` (from a
    signal handler) ends the run early, its report saying what was finished, as
    :func:`~flyconfigs.tuner.run.tune` and :func:`~flyconfigs.tuner.fleet.tune_fleet` say.

    Raises :class:`UnknownKernelError`, :class:`InvalidKeyError` or
    :class:`TuneError`; the workers are always closed."""
    kernel, options, fleet = request.kernel, request.options, request.fleet
    decl = tunable_kernel(kernel)
    if options.budget is not None and options.budget < 1:
        raise InvalidKeyError("--budget must be at least 1")
    if not request.grids:
        raise InvalidKeyError(f"no key grid for {kernel!r}: give --key-grid (presets: {', '.join(key_presets(decl)) or 'none'})")
    keys = parse_grids(list(request.grids), decl, request.extra)
    toolchain: Any = None
    if fleet is not None:
        from flyconfigs.tuner.fleet import FleetRequest, tune_fleet

        report = tune_fleet(FleetRequest(kernel, keys, request.out, request.backend, options, request.cross_check,
                                         address=fleet.address, target=fleet.target), progress, stop)
    else:
        workers, toolchain = _workers(kernel, request.backend, request.ordinals)
        try:
            report = tune(decl, keys, request.out, workers, toolchain, options, progress, cross_check=request.cross_check,
                          stop=stop)
        finally:
            getattr(toolchain, "close", lambda: None)()
            for worker in workers:
                worker.close()
    summary = {
        "device": report.device.model_dump(mode="json"),
        "keys": len(report.results),
        "tuned": sum(not r.skipped for r in report.results),
        "skipped": sum(r.skipped for r in report.results),
        "interrupted": report.interrupted,
        "not_reached": report.not_reached,
        "seconds": report.seconds,
        "worker_restarts": report.worker_restarts,
        "workers": len(report.workers),
        "devices": list(request.ordinals) if fleet is None else None,
        "tuned_on": report.workers,
        "disagreements": report.disagreements,
        "left_out": report.left_out,
        "lost": report.lost,
        "compiled": getattr(toolchain, "compiled", None),
        "compile_cache_hits": getattr(toolchain, "cached", None),
        "compiler_seconds": getattr(toolchain, "compile_seconds", None),
        "compile_processes": getattr(toolchain, "workers", None),
        "artifacts": [str(r.path) for r in report.results if r.path],
    }
    return SessionResult(report, summary)
