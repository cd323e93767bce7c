"""Compiling a key's candidates in parallel processes, through the GPU layer's cache.

Runs in the parent: runtime compilers need no GPU context, so the kernel's build step
(:meth:`~flyconfigs.kernels.plugin.TunableKernel.build`) names what each candidate
compiles, a pool of processes compiles it for the device's arch into the shared on-disk
cache, and the measuring worker then loads it from there.  A second run compiles nothing.
Kernels that compile on first launch (Triton) build nothing here.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from typing import Any

from flyconfigs.errors import CompileError, TuneError
from flyconfigs.gpu.backend import CompileRequest
from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.registry.device import DeviceQuery
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


def _compile_one(backend: str, arch: str, request: CompileRequest) -> tuple[str | None, bool]:
    from flyconfigs.gpu import get_backend

    compiler = get_backend(backend, arch=arch)
    try:
        return None, compiler.compile(request).from_cache
    except CompileError as exc:
        return str(exc)[:4000], False


class GPUToolchain:
    """Parent-side compiler for a real backend."""

    def __init__(self, backend: str, workers: int) -> None:
        self.name = backend
        self.workers = max(1, workers)
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self.compiled = 0
        self.cached = 0

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            return self._executor_locked()

    def _executor_locked(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"))
        return self._pool

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
        pool = self._executor()
        futures = [pool.submit(_compile_one, self.name, device.arch, r) if r is not None else None for r in requests]
        errors: list[str | None] = []
        for future in futures:
            if future is None:
                errors.append(None)
                continue
            error, from_cache = future.result()
            errors.append(error)
            if error is None:
                with self._lock:
                    self.cached += from_cache
                    self.compiled += not from_cache
        return errors

    def compile_resources(self, kernel: TunableKernel, key: Mapping[str, Any], configs: list[Mapping[str, Any]],
                          device: Device, block_threads: Callable[[Mapping[str, Any]], int]) -> list[str | Resources]:
        """Compile each config for ``device``'s arch (the GPU layer's parallel threads, through
        its cache) and read what it uses at its block size (``block_threads``): its compile
        error, or its resources.  On AMD the code object says it all (no GPU needed); on
        NVIDIA the driver loads it.  Runs in this process: a compile-only runtime (hipRTC
        under its own loader) is not inherited by spawned workers."""
        from flyconfigs.gpu import get_backend

        query = DeviceQuery.of(device.identity)
        requests = []
        for config in configs:
            request = kernel.build(config, key, query)
            if request is None:
                raise TuneError(f"kernel {kernel.name!r} compiles on its first launch: there is nothing to read before it runs")
            requests.append(request)
        if self.name == "cuda":
            # The driver reports an NVIDIA function's resources once it is loaded: this
            # needs the GPU itself.
            backend = get_backend("cuda")
            if backend.device().arch != device.arch:
                raise TuneError(f"predicting for {device.arch} reads resources through the driver: it needs that GPU, "
                                f"and this one is {backend.device().arch}")
            backend.activate()
        else:
            backend = get_backend(self.name, arch=device.arch)
        out: list[str | Resources] = []
        for config, result in zip(configs, backend.compile_many(requests, workers=self.workers), strict=True):
            if isinstance(result, CompileError):
                out.append(str(result)[:4000])
                continue
            with self._lock:
                self.cached += result.from_cache
                self.compiled += not result.from_cache
            out.append(backend.resources(result, block_threads(config)))
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
