"""Tuning on this host: every key of a grid on one or more measuring workers (one per
GPU, or several on one), scheduled by :class:`~flyconfigs.tuner.scheduler.Scheduler`,
each key tuned by a :class:`~flyconfigs.tuner.key.KeyTuner` in a thread of its worker,
with compilation queued ahead so that later keys compile while the GPU measures this
one; optionally cross-checked, each key re-tuned on a second device.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flyconfigs.errors import TuneError
from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.schema.models import Device
from flyconfigs.tuner import emit
from flyconfigs.tuner.key import KeyTuner, candidate_configs
from flyconfigs.tuner.options import KeyResult, Progress, Toolchain, TuneOptions
from flyconfigs.tuner.scheduler import Outcome, Scheduler, Slot, Tuned, TuneReport
from flyconfigs.tuner.worker import Worker

__all__ = ["KeyResult", "Progress", "TuneOptions", "TuneReport", "tune"]


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
    Raises :class:`TuneError` for an unusable ``out`` or key, and a key's failure after
    the keys in flight on the other workers have been written."""
    workers = [worker] if isinstance(worker, Worker) else list(worker)
    if not workers:
        raise TuneError("no worker to tune on")
    emit.check_writable(out)
    checked = [kernel.check_key(k) for k in keys]
    devices = [Device.model_validate(w.device) for w in workers]
    scheduler = Scheduler(kernel.name, checked, out, options, cross_check=cross_check and len(workers) > 1,
                          progress=progress, stop=stop)
    tuners = [KeyTuner(kernel, toolchain, w, d, options, notify=scheduler.notify) for w, d in zip(workers, devices, strict=True)]
    slots = _LocalSlots(tuners)
    started = time.perf_counter()
    ahead = threading.Thread(target=_compile_ahead, args=(scheduler, slots.slots[0], kernel, toolchain),
                             name="flyconfigs-compile-ahead", daemon=True)
    if len({d.arch for d in devices}) == 1:  # compiled once for the first worker's arch
        ahead.start()
    try:
        report = scheduler.run(slots)
    finally:
        scheduler.closing.set()
        if ahead.is_alive():
            ahead.join()
    report.seconds["total"] = time.perf_counter() - started
    return report


class _LocalSlots:
    """This host's measuring workers as slots: a key runs in a thread of its own
    (the worker process does the measuring), its outcome queued for the scheduler."""

    def __init__(self, tuners: Sequence[KeyTuner]) -> None:
        host = emit.host()
        self._tuners = list(tuners)
        self.slots = [Slot(f"{host} GPU {t.device.ordinal if t.device.ordinal is not None else 0}", host, t.device,
                           t.versions, t.source_sha) for t in tuners]
        self._ended: queue.Queue[tuple[int, Outcome]] = queue.Queue()
        self._threads: dict[int, threading.Thread] = {}

    def start(self, slot: int, key: dict[str, Any]) -> None:
        def run() -> None:
            outcome: Outcome
            try:
                outcome = Tuned(*self._tuners[slot].tune(key))
            except BaseException as exc:  # noqa: BLE001 - handed to the scheduler, which raises it
                outcome = exc
            self._ended.put((slot, outcome))

        thread = threading.Thread(target=run, name=f"flyconfigs-tune-{slot}")
        self._threads[slot] = thread
        thread.start()

    def wait(self, timeout: float) -> tuple[int, Outcome] | None:
        try:
            slot, outcome = self._ended.get(timeout=timeout)
        except queue.Empty:
            return None
        self._threads.pop(slot).join()
        return slot, outcome

    def cancel(self) -> None:
        # The scheduler has set the stop event: each key in flight ends at its next
        # candidate; the workers must be idle before the caller closes them.
        for thread in self._threads.values():
            thread.join()
        self._threads.clear()

    def restarts(self) -> int:
        return sum(t.worker.restarts for t in self._tuners)


def _compile_ahead(scheduler: Scheduler, first: Slot, kernel: TunableKernel, toolchain: Toolchain) -> None:
    """Every key still to tune queued for compiling on the first worker's device (the
    run's devices share one arch), in the order asked, until no key will be handed out."""
    options = scheduler.options
    try:
        for index, key in enumerate(scheduler.keys):
            if scheduler.closing.is_set():
                return
            if scheduler.tuned_before(index, first):
                continue
            toolchain.compile_ahead(kernel, key, candidate_configs(kernel, key, first.device, options.budget), first.device)
    except Exception:  # noqa: BLE001 - the key's own compile_all meets the same error and reports it
        return
