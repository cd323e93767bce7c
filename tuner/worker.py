"""Failure isolation: measurements run in a worker process that can die.

A :class:`Worker` starts a child process (``spawn``) that builds a measurer from
``"module:factory"`` and answers typed requests (:mod:`flyconfigs.tuner.measurer`) over a pipe.  A candidate that faults the GPU
context, hangs past its timeout or kills the process surfaces as :class:`WorkerLost`
(with the reason); the caller records it against that candidate and :meth:`restart`
gives a fresh process and context.  Errors a measurer declares for a candidate come back
as results; anything else raised in the child is a bug and is re-raised as
:class:`~flyconfigs.errors.TuneError`.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import traceback
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from flyconfigs.errors import FlyconfigsError, TuneError
from flyconfigs.tuner.measurer import Check, CheckResult, Prepare, Request, Time, answer

__all__ = ["Worker", "WorkerLost"]


class WorkerLost(Exception):
    """The worker process died or stopped answering; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _serve(conn: Connection, factory: str, options: dict[str, Any]) -> None:
    # Ctrl-C and termination are the parent's to handle: it stops the run at the next
    # candidate and closes its workers.  Both reach the worker too (a terminal signals
    # its whole process group, and so do `timeout` and batch systems); a worker that
    # took them would die mid-key.  A parent that dies anyway closes the pipe, and the
    # worker ends on EOF.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    module, _, name = factory.partition(":")
    try:
        measurer = getattr(importlib.import_module(module), name)(**options)
        device = measurer.device()
    except (FlyconfigsError, ImportError, RuntimeError) as exc:
        conn.send(("unavailable", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ok", device))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        try:
            conn.send(("ok", answer(measurer, request)))
        except Exception:  # noqa: BLE001 - reported to the parent, which raises it as a bug
            conn.send(("bug", traceback.format_exc()))


class Worker:
    """The parent's handle on one measuring process."""

    def __init__(self, factory: str, options: dict[str, Any] | None = None, start_timeout: float = 300.0) -> None:
        self.factory = factory
        self.options = dict(options or {})
        self.start_timeout = start_timeout
        self.restarts = 0
        self._ctx = mp.get_context("spawn")
        self._process: Any = None
        self._conn: Connection | None = None
        self._start()

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._process = self._ctx.Process(target=_serve, args=(child, self.factory, self.options), daemon=True)
        self._process.start()
        child.close()
        self._conn = parent
        self.device: dict[str, Any] = self._receive(None, self.start_timeout)

    def prepare(self, key: Mapping[str, Any], copies: int, traffic: int, timeout: float = 120.0) -> None:
        """Allocate the inputs of ``key`` in the worker (see :class:`Prepare`)."""
        self._receive(Prepare(dict(key), copies, traffic), timeout)

    def check(self, config: Mapping[str, Any], timeout: float = 120.0) -> CheckResult:
        """Verify one candidate in the worker (see :class:`Check`)."""
        result = self._receive(Check(dict(config)), timeout)
        if not isinstance(result, CheckResult):
            raise TuneError(f"the measurer answered a check with {type(result).__name__}, not a CheckResult")
        return result

    def time(self, configs: Sequence[Mapping[str, Any]], launches: int, samples: int, warmup: int,
             timeout: float = 120.0, hold: bool = True) -> list[list[float]]:
        """Per-call samples of each config, interleaved (see :class:`Time`)."""
        raw = self._receive(Time([dict(c) for c in configs], launches, samples, warmup, hold), timeout)
        return [[float(v) for v in row] for row in raw]

    def _receive(self, request: Request | None, timeout: float) -> Any:
        """Send ``request`` (``None``: only wait for the start-up answer) and return the
        answer; :class:`WorkerLost` if the worker dies or times out."""
        assert self._conn is not None
        try:
            if request is not None:
                self._conn.send(request)
            if not self._conn.poll(timeout):
                self._kill()
                raise WorkerLost(f"no answer within {timeout:.0f} s (killed)")
            status, value = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            code = self._exit_code()
            raise WorkerLost(f"the worker process died (exit code {code})") from None
        if status == "bug":
            raise TuneError(f"the measurer failed in the worker:\n{value}")
        if status == "unavailable":
            self._exit_code()
            raise TuneError(f"cannot start the measuring worker: {value}")
        return value

    def _exit_code(self) -> int | None:
        if self._process is None:
            return None
        self._process.join(timeout=10)
        code: int | None = self._process.exitcode
        return code

    def _kill(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=10)

    def restart(self) -> None:
        """Replace the worker with a fresh process (and GPU context)."""
        self.close()
        self.restarts += 1
        self._start()

    def close(self) -> None:
        """Stop the worker."""
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._conn.close()
            self._conn = None
        if self._process is not None:
            self._process.join(timeout=10)
            self._kill()
            self._process = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def available_cpus() -> int:
    """CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1
