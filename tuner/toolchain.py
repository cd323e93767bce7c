"""Compiling a key's candidates in parallel processes, through the GPU layer's cache.

Runs in the parent: runtime compilers need no GPU context, so the kernel's build step
(:meth:`~flyconfigs.kernels.plugin.TunableKernel.build`) names what each candidate
compiles, a pool of processes compiles it for the device's arch into the shared on-disk
cache, and the measuring worker then loads it from there.  A second run compiles nothing.
Kernels that compile on first launch (Triton) build nothing here.

Compiling is queued ahead (:meth:`GPUToolchain.compile_ahead`): while the GPU verifies
and times one key, the pool already compiles the next keys' candidates, at a lower CPU
priority than the measuring process.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import BrokenExecutor, Executor, Future, ProcessPoolExecutor
from importlib import metadata
from typing import Any

from flyconfigs.errors import CompileError, TuneError
from flyconfigs.gpu.backend import CompileRequest
from flyconfigs.gpu.cubin import resources_from_cubin
from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema.models import Device, Resources

__all__ = ["GPUToolchain", "portable_options"]

INCLUDE_TAIL = 3
"""How many trailing parts of an include directory an artifact keeps."""


def portable_options(options: list[str]) -> list[str]:
    """``options`` with each include directory (``-I DIR``) cut to its last
    :data:`INCLUDE_TAIL` parts behind ``.../``: which headers were used
    (``.../nvidia/cu13/include``), not where one machine keeps them."""
    out = []
    for option in options:
        if option.startswith("-I") and len(option) > 2:
            parts = [p for p in option[2:].replace("\\", "/").split("/") if p]
            if len(parts) > INCLUDE_TAIL:
                option = "-I.../" + "/".join(parts[-INCLUDE_TAIL:])
        out.append(option)
    return out


COMPILE_NICENESS = 10
"""How much lower than the tuner's own the compiling processes' CPU priority is: the
measuring process, which launches and times on the GPU, comes first."""


def _start_compiler() -> None:
    """A compiling process: lower priority, and Ctrl-C or termination left to the parent
    (they reach the whole process group), which stops the run and then the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.nice(COMPILE_NICENESS)
    except OSError:  # pragma: no cover - a platform without nice, or a sandbox forbidding it
        pass


CompileOutcome = tuple[str | None, bool, float]
"""A compile's error (or None), whether the cache had it, and the seconds it took."""

CRASHED = ("the compiler's process died compiling this variant: the runtime compiler crashed "
           "instead of reporting an error")


def _compile_one(backend: str, arch: str, request: CompileRequest) -> CompileOutcome:
    """Compile one request: its error (or None), whether the cache had it, and the seconds it took."""
    from flyconfigs.gpu import get_backend

    started = time.perf_counter()
    compiler = get_backend(backend, arch=arch)
    try:
        from_cache = compiler.compile(request).from_cache
    except CompileError as exc:
        return str(exc)[:4000], False, time.perf_counter() - started
    return None, from_cache, time.perf_counter() - started


def _process_pool(workers: int) -> Executor:
    return ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_start_compiler)


class GPUToolchain:
    """Parent-side compiler for a real backend.

    ``executor_factory`` makes what runs the compiles; by default a pool of ``workers``
    spawned processes at a lower CPU priority.  (A compile-only hipRTC, loaded through its
    own loader, is not inherited by spawned processes; run under it, make a thread pool.)
    ``compile_one`` compiles one request in that pool (:func:`_compile_one`).

    A compiling process that dies (the runtime compiler crashing) breaks its pool: the
    pool is replaced, each compile it lost runs again, and one that breaks a pool twice
    is compiled alone; if that process dies too, the variant is recorded as a compile
    error (:data:`CRASHED`) and the run goes on."""

    def __init__(self, backend: str, workers: int, executor_factory: Callable[[], Executor] | None = None,
                 compile_one: Callable[[str, str, CompileRequest], CompileOutcome] = _compile_one) -> None:
        self.name = backend
        self.workers = max(1, workers)
        self._factory = executor_factory or (lambda: _process_pool(self.workers))
        self._compile_one = compile_one
        self._pool: Executor | None = None
        self._generation = 0
        self._lock = threading.Lock()
        self._futures: dict[tuple[str, CompileRequest], tuple[Future[CompileOutcome], int]] = {}
        self._taken: set[tuple[str, CompileRequest]] = set()
        self.compiled = 0
        self.cached = 0
        self.compile_seconds = 0.0
        """Seconds the compiling processes spent, summed over them (they overlap each other
        and the measuring)."""

    def _executor_locked(self) -> Executor:
        if self._pool is None:
            self._pool = self._factory()
        return self._pool

    def _submit_locked(self, arch: str, request: CompileRequest) -> tuple[Future[CompileOutcome], bool]:
        """The one compile of ``request`` for ``arch`` this toolchain makes (queued now if
        it was not before), and whether it was new."""
        found = self._futures.get((arch, request))
        if found is not None:
            return found[0], False
        try:
            future = self._executor_locked().submit(self._compile_one, self.name, arch, request)
        except BrokenExecutor:  # a process died since the last compile was taken
            self._replace_pool_locked()
            future = self._executor_locked().submit(self._compile_one, self.name, arch, request)
        self._futures[(arch, request)] = (future, self._generation)
        return future, True

    def _replace_pool_locked(self) -> None:
        """Drop the current (broken) pool and every compile that did not finish in it."""
        broken, self._pool = self._pool, None
        self._generation += 1
        if broken is not None:
            broken.shutdown(wait=False, cancel_futures=True)
        self._futures = {k: (f, g) for k, (f, g) in self._futures.items()
                         if f.done() and not f.cancelled() and f.exception() is None}

    def _forget_broken_locked(self, arch: str, request: CompileRequest) -> None:
        """``request``'s compile was lost with its pool: replace the pool if it is still the
        current one (keeping only the compiles that finished), else forget that compile."""
        found = self._futures.get((arch, request))
        if found is None or found[1] != self._generation or self._pool is None:
            self._futures.pop((arch, request), None)
            return
        self._replace_pool_locked()

    def _outcome(self, arch: str, request: CompileRequest, future: Future[CompileOutcome]) -> CompileOutcome:
        for _ in range(2):
            try:
                return future.result()
            except BrokenExecutor:
                with self._lock:
                    self._forget_broken_locked(arch, request)
                    future = self._submit_locked(arch, request)[0]
        with self._lock:
            self._forget_broken_locked(arch, request)
        alone = _process_pool(1)
        try:
            outcome = alone.submit(self._compile_one, self.name, arch, request).result()
        except BrokenExecutor:
            outcome = (CRASHED, False, 0.0)
        finally:
            alone.shutdown(cancel_futures=True)
        done: Future[CompileOutcome] = Future()
        done.set_result(outcome)
        with self._lock:
            self._futures[(arch, request)] = (done, self._generation)
        return outcome

    def compile_ahead(self, kernel: TunableKernel, key: Mapping[str, Any], configs: list[Mapping[str, Any]],
                      device: Device) -> int:
        """Queue the compiles of ``configs`` for ``key`` and return at once; a later
        :meth:`compile_all` of the same key takes their results instead of compiling again.
        Queued keys compile in the order they were queued.  Returns how many were queued."""
        query = DeviceQuery.of(device.identity)
        requests = [kernel.build(c, key, query) for c in configs]
        with self._lock:
            return sum(self._submit_locked(device.arch, r)[1] for r in requests if r is not None)

    def versions(self) -> dict[str, str]:
        out = {}
        for dist in ("cuda-bindings", "hip-python", "torch"):
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        from flyconfigs.gpu import binding_for

        out["compiler"] = binding_for(self.name).compiler_version()
        return out

    def options(self) -> list[str]:
        """The options every candidate shares (the arch and the ``-D`` of each come on top),
        as an artifact records them: see :func:`portable_options`."""
        from flyconfigs.gpu import binding_for

        binding = binding_for(self.name)
        return portable_options([binding.define, *binding.default_options])

    def compile_all(self, kernel: TunableKernel, key: Mapping[str, Any], configs: list[Mapping[str, Any]],
                    device: Device) -> list[str | None]:
        """Compile what ``kernel`` builds ahead for each config (its
        :meth:`~flyconfigs.kernels.plugin.TunableKernel.build`), in parallel; each
        config's compile error, or ``None`` (also when it compiles on first launch)."""
        query = DeviceQuery.of(device.identity)
        requests = [kernel.build(c, key, query) for c in configs]
        with self._lock:
            futures = [self._submit_locked(device.arch, r)[0] if r is not None else None for r in requests]
        errors: list[str | None] = []
        for request, future in zip(requests, futures, strict=True):
            if request is None or future is None:
                errors.append(None)
                continue
            error, from_cache, seconds = self._outcome(device.arch, request, future)
            errors.append(error)
            with self._lock:
                # A compile that an earlier key (or an earlier config of this one) took
                # counts as a cache hit, as it would have been without the queue.
                first = (device.arch, request) not in self._taken
                self._taken.add((device.arch, request))
                self.compile_seconds += seconds if first else 0.0
                if error is None:
                    self.cached += from_cache or not first
                    self.compiled += not from_cache and first
        return errors

    def compile_resources(self, kernel: TunableKernel, key: Mapping[str, Any], configs: list[Mapping[str, Any]],
                          device: Device, block_threads: Callable[[Mapping[str, Any]], int]) -> list[str | Resources]:
        """Compile each config for ``device``'s arch (the GPU layer's parallel threads, through
        its cache) and read what it uses at its block size (``block_threads``): its compile
        error, or its resources.  The code object says it all, no GPU needed: AMD's
        metadata note, NVIDIA's cubin sections (:mod:`flyconfigs.gpu.cubin`, for the arches
        it lists).  Runs in this process: a compile-only runtime (hipRTC
        under its own loader) is not inherited by spawned workers."""
        from flyconfigs.gpu import get_backend

        query = DeviceQuery.of(device.identity)
        requests = []
        for config in configs:
            request = kernel.build(config, key, query)
            if request is None:
                raise TuneError(f"kernel {kernel.name!r} compiles on its first launch: there is nothing to read before it runs")
            requests.append(request)
        backend = get_backend(self.name, arch=device.arch)
        out: list[str | Resources] = []
        for config, result in zip(configs, backend.compile_many(requests, workers=self.workers), strict=True):
            if isinstance(result, CompileError):
                out.append(str(result)[:4000])
                continue
            with self._lock:
                self.cached += result.from_cache
                self.compiled += not result.from_cache
            if self.name == "cuda":
                # The cubin records what the driver would report: no GPU needed.
                out.append(resources_from_cubin(result.code, result.lowered_name, device.arch, block_threads(config)))
            else:
                out.append(backend.resources(result, block_threads(config)))
        return out

    def close(self) -> None:
        """Drop what was queued ahead and not started, and stop the pool."""
        with self._lock:
            self._futures, self._taken = {}, set()
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(cancel_futures=True)
