"""The one tuning scheduler: every key of a run handed to whichever slot is free, for
both kinds of slot — a measuring worker process of this host (:mod:`flyconfigs.tuner.run`)
and a GPU actor of a Ray cluster (:mod:`flyconfigs.tuner.fleet`).

The scheduler alone decides what happens to a key: it skips the keys ``resume`` finds
tuned, writes every artifact (atomically, from the calling thread), puts the key of a
lost slot back in the queue, stops handing out keys at the first failure (the keys in
flight finish and are written, then the failure is raised), runs the cross-check, and
turns a stop (a signal handler's event or ``KeyboardInterrupt``) into a report of what
was finished and what was not reached.  A kind of slot only starts a key on a slot and
says how it ended (:class:`SlotKind`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from flyconfigs.errors import TuneError
from flyconfigs.schema.models import Artifact, Device
from flyconfigs.tuner import emit
from flyconfigs.tuner.crosscheck import disagreements, reassign_check, spread_cross_checks
from flyconfigs.tuner.options import KeyResult, Progress, TuneOptions

__all__ = ["Lost", "Scheduler", "Slot", "SlotKind", "Tuned", "TuneReport", "add_seconds"]

POLL_S = 0.25
"""How long the scheduler waits for a slot before it looks at the stop event again."""


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


@dataclass(eq=False)
class Slot:
    """One place a key is tuned: its name in reports, its node (a host for local
    workers), its device and what the resume check compares (toolchain versions and
    the kernel source's hash).  ``extra`` goes with every ``dispatch`` event."""

    name: str
    node: str
    device: Device
    versions: dict[str, str]
    source_sha: str
    extra: dict[str, Any] = field(default_factory=dict)
    alive: bool = True


@dataclass(frozen=True)
class Tuned:
    """A key a slot finished: its result and its artifact (not yet written)."""

    result: KeyResult
    artifact: Artifact


@dataclass(frozen=True)
class Lost:
    """The slot itself is gone (an actor or its node died) with the key it held."""

    reason: str


Outcome = Tuned | Lost | BaseException
"""How a key on a slot ended; an exception is the key's failure, raised by the scheduler."""


class SlotKind(Protocol):
    """A kind of slot: starts one key on a slot and reports, one at a time, how keys ended."""

    @property
    def slots(self) -> Sequence[Slot]:
        """The slots, each with its index in :meth:`start` and :meth:`wait`."""

    def start(self, slot: int, key: dict[str, Any]) -> None:
        """Begin tuning ``key`` on ``slots[slot]``, which is idle; returns at once."""

    def wait(self, timeout: float) -> tuple[int, Outcome] | None:
        """The slot of a key that ended and how, or None after ``timeout`` seconds."""

    def cancel(self) -> None:
        """The run stops: end or abandon the keys in flight (none is written)."""

    def restarts(self) -> int:
        """Measuring worker restarts after faults, over every slot that can still say."""


class Scheduler:
    """One run of ``keys`` of ``kernel`` into ``out``: :meth:`run` on a kind of slot.

    ``notify`` is ``progress`` made safe for the slots' threads: called under a lock,
    and raising :class:`KeyboardInterrupt` once ``stop`` is set (see :func:`locked`).
    ``closing`` is set once no further key will be handed out (the run ended, failed or
    was stopped): work done ahead of the slots, such as compiling, watches it."""

    def __init__(self, kernel: str, keys: Sequence[dict[str, Any]], out: Path, options: TuneOptions,
                 cross_check: bool = False, progress: Progress | None = None,
                 stop: threading.Event | None = None) -> None:
        self.kernel = kernel
        self.keys = list(keys)
        self.out = out
        self.options = options
        self.cross_check = cross_check
        # The run's own event when the caller gave none: a KeyboardInterrupt sets it so
        # that keys in flight on this host's workers stop at their next candidate.
        self.stop = stop if stop is not None else threading.Event()
        self.notify = locked(progress or (lambda event, data: None), self.stop)
        self.closing = threading.Event()
        self._resumed: dict[tuple[int, str], bool] = {}
        self._results: dict[int, KeyResult] = {}
        self._winners: dict[int, list[tuple[int, Artifact]]] = {}

    def tuned_before(self, index: int, slot: Slot) -> bool:
        """``--resume``'s check for key ``index`` on ``slot``'s device, read once per
        device identity (work done ahead of the slots asks too)."""
        if not self.options.resume:
            return False
        memo = (index, slot.device.identity.model_dump_json())
        if memo not in self._resumed:
            self._resumed[memo] = emit.already_tuned(self.out, self.kernel, self.keys[index], slot.device.identity,
                                                     slot.source_sha, slot.versions)
        return self._resumed[memo]

    def run(self, kind: SlotKind, device: str | None = None, left_out: Sequence[str] = ()) -> TuneReport:
        """Tune every key on ``kind``'s slots, then cross-check when asked; ``device``
        describes the target in the ``start`` event (default: the slots' devices).

        Returns the report, ``interrupted`` set when the run was stopped.  Raises the
        first failure of a key (``TuneError`` naming each when several slots failed at
        once) after the keys in flight have been written, or :class:`TuneError` when
        every slot was lost before the last key."""
        slots = kind.slots
        report = TuneReport(slots[0].device, workers=[s.name for s in slots], left_out=list(left_out))
        described = device or ", ".join(sorted({s.device.identity.describe() for s in slots}))
        try:
            self.notify("start", {"keys": len(self.keys), "device": described, "workers": len(slots),
                                  "nodes": len({s.node for s in slots}), "left_out": list(left_out)})
            self._tune_all(kind, report)
            if self.cross_check:
                self._check_all(kind, report)
                report.disagreements = disagreements(self.keys, self._winners)
        except KeyboardInterrupt:
            self.stop.set()
            kind.cancel()
            report.interrupted = True
            report.not_reached = [self.keys[i] for i in range(len(self.keys)) if i not in self._results]
        except BaseException:
            # A failure raised with keys still in flight (a resume check or a dispatch
            # that broke): they stop too, so the caller can close the workers.
            self.stop.set()
            kind.cancel()
            raise
        finally:
            self.closing.set()
        report.results = [self._results[i] for i in sorted(self._results)]
        report.worker_restarts = kind.restarts()
        return report

    def _tune_all(self, kind: SlotKind, report: TuneReport) -> None:
        """Every key once, handed out as slots free up; resumed keys skipped; a lost
        slot's key back at the head of the queue."""
        todo = deque(range(len(self.keys)))

        def take(slot: int) -> int | None:
            while todo:
                index = todo.popleft()
                if self.tuned_before(index, kind.slots[slot]):
                    self._results[index] = KeyResult(self.keys[index], None, skipped=True)
                    self.notify("skip", {"key": self.keys[index]})
                    continue
                return index
            return None

        def done(index: int, slot: int, tuned: Tuned) -> None:
            result = tuned.result
            result.path = emit.write_artifact(self.out, tuned.artifact)
            add_seconds(report, result)
            # Recorded before the event: a stop raised from it leaves this key counted.
            self._results[index] = result
            self._winners.setdefault(index, []).append((slot, tuned.artifact))
            self.notify("key", {"key": self.keys[index], "result": result, "worker": kind.slots[slot].name})

        self._drive(kind, report, take, lambda index, slot: todo.appendleft(index), done)
        missing = [self.keys[i] for i in range(len(self.keys)) if i not in self._results]
        if missing:
            raise TuneError(f"every GPU of the run was lost; {len(missing)} keys not tuned (run again with --resume): "
                            + ", ".join(map(str, missing[:5])) + (" …" if len(missing) > 5 else ""))

    def _check_all(self, kind: SlotKind, report: TuneReport) -> None:
        """Each tuned key re-tuned on a twin (another node first), spread evenly; a key
        whose checker is lost goes to another twin, or is not re-checked if none is left."""
        slots = kind.slots
        identities = [s.device.identity for s in slots]
        first = {i: found[0][0] for i, found in self._winners.items()}
        pinned = spread_cross_checks(first, identities, [s.node for s in slots], [s.alive for s in slots])
        queues = [deque(p) for p in pinned]
        # Checks each slot was given in all (done, in flight and queued): a lost slot's
        # checks go to the twins given the fewest, so the spread stays even after a loss.
        given = [len(p) for p in pinned]

        def lost_key(index: int, slot: int) -> None:
            given[slot] = 0
            for moved in [index, *queues[slot]]:
                home = first[moved]
                twins = [n for n, s in enumerate(slots) if s.alive and n != home and identities[n] == identities[home]]
                chosen = reassign_check(twins, given, [s.node != slots[home].node for s in slots])
                if chosen is not None:
                    queues[chosen].append(moved)
                    given[chosen] += 1
            queues[slot].clear()

        def done(index: int, slot: int, tuned: Tuned) -> None:
            add_seconds(report, tuned.result)
            self._winners[index].append((slot, tuned.artifact))
            self.notify("cross-check", {"key": self.keys[index], "worker": slots[slot].name})

        self._drive(kind, report, lambda slot: queues[slot].popleft() if queues[slot] else None, lost_key, done)

    def _drive(self, kind: SlotKind, report: TuneReport, take: Callable[[int], int | None],
               lost_key: Callable[[int, int], None], done: Callable[[int, int, Tuned], None]) -> None:
        """Keep every live slot busy with the key ``take`` gives it until none is left.
        A lost slot is dropped and its key handed to ``lost_key``; the first failure
        stops new dispatches, the keys in flight finish, then the failures are raised.
        A set ``stop`` raises :class:`KeyboardInterrupt`."""
        slots = kind.slots
        busy: dict[int, int] = {}
        idle = deque(n for n, s in enumerate(slots) if s.alive)
        failures: list[Exception] = []
        while True:
            if self.stop.is_set():
                raise KeyboardInterrupt
            while not failures and idle:
                slot = idle.popleft()
                index = take(slot)
                if index is None:
                    continue
                kind.start(slot, self.keys[index])
                busy[slot] = index
                self.notify("dispatch", {"key": self.keys[index], "worker": slots[slot].name, **slots[slot].extra})
            if not busy:
                break
            ended = kind.wait(POLL_S)
            if ended is None:
                continue
            slot, outcome = ended
            index = busy.pop(slot)
            if isinstance(outcome, Lost):
                slots[slot].alive = False
                report.lost.append(f"{slots[slot].name}: {outcome.reason}")
                self.notify("lost", {"worker": slots[slot].name, "key": self.keys[index], "reason": outcome.reason})
                lost_key(index, slot)
                if not failures:  # slots that found the queue empty may have work again
                    idle.extend(n for n, s in enumerate(slots) if s.alive and n not in idle and n not in busy)
                continue
            if isinstance(outcome, Exception):
                failures.append(outcome)
                self.closing.set()
                continue
            if isinstance(outcome, BaseException):  # KeyboardInterrupt and the like: stop now
                raise outcome
            try:
                done(index, slot, outcome)
            except Exception as exc:  # noqa: BLE001 - e.g. the artifact cannot be written: raised below
                failures.append(exc)
                self.closing.set()
                continue
            idle.append(slot)
        if failures:
            raise _one_error(failures)


def add_seconds(report: TuneReport, result: KeyResult) -> None:
    """Add one key's phase times to the run's."""
    for name, value in result.seconds.items():
        report.seconds[name] = report.seconds.get(name, 0.0) + value


def locked(progress: Progress, stop: threading.Event) -> Progress:
    """``progress`` called under a lock; once ``stop`` is set, every call raises
    :class:`KeyboardInterrupt` instead, at a point where nothing is half written.  A
    ``key`` event, which reports a key already written, is still passed on first."""
    lock = threading.Lock()

    def call(event: str, data: dict[str, Any]) -> None:
        stopped = stop.is_set()
        if stopped and event != "key":
            raise KeyboardInterrupt
        with lock:
            progress(event, data)
        if stopped:
            raise KeyboardInterrupt

    return call


def _one_error(failures: list[Exception]) -> Exception:
    """The failure to raise: the only one, or a :class:`TuneError` naming each."""
    if len(failures) == 1:
        return failures[0]
    lines = "; ".join(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}" for e in failures)
    error = TuneError(f"{len(failures)} workers failed: {lines}")
    error.__cause__ = failures[0]
    return error

