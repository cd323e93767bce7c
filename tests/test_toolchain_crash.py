"""The tuner's compile pool when a compiling process dies.

A runtime compiler that crashes (a segfault in NVRTC or hipRTC) takes its process and
the whole process pool with it.  No compiler here can be made to crash on demand, so the
compile step is a stand-in that kills its own process for variants named ``crash`` and
compiles nothing for the rest; the pool, its processes and their deaths are real."""

from __future__ import annotations

import os
import time

from flyconfigs.gpu.backend import CompileRequest
from flyconfigs.schema.models import Device
from flyconfigs.tuner.toolchain import CRASHED, GPUToolchain

DEVICE = Device(vendor="nvidia", arch="sm90", product="NVIDIA H200", compute_units=132, wave_size=32)


def compile_or_die(backend: str, arch: str, request: CompileRequest) -> tuple[str | None, bool, float]:
    if request.name_expression.startswith("crash"):
        os._exit(11)
    time.sleep(0.05)  # long enough for the crash to land while others are in flight
    return None, False, 0.05


class NamedVariants:
    """A kernel whose configs name the entry point each variant compiles."""

    def build(self, config: dict[str, str], key: object, device: object) -> CompileRequest:
        return CompileRequest("source", config["name"])


def test_a_crashing_variant_is_a_compile_error_and_the_others_still_compile() -> None:
    toolchain = GPUToolchain("cuda", 2, compile_one=compile_or_die)
    kernel = NamedVariants()
    first = [{"name": f"ok{i}"} for i in range(6)]
    first.insert(3, {"name": "crash"})
    second = [{"name": "ok0"}, {"name": "later"}]
    try:
        toolchain.compile_ahead(kernel, {"M": 1}, first, DEVICE)  # type: ignore[arg-type]
        toolchain.compile_ahead(kernel, {"M": 2}, second, DEVICE)  # type: ignore[arg-type]
        errors = toolchain.compile_all(kernel, {"M": 1}, first, DEVICE)  # type: ignore[arg-type]
        again = toolchain.compile_all(kernel, {"M": 2}, second, DEVICE)  # type: ignore[arg-type]
    finally:
        toolchain.close()
    assert errors == [None, None, None, CRASHED, None, None, None], "only the variant that crashes fails"
    assert toolchain.compiled == 7, "each variant that compiled counts once, the crash not at all"
    assert again == [None, None], "compiles queued in the pool that broke ran again in its replacement"
    assert toolchain.cached == 1, "ok0, shared by both keys, was compiled once"


def test_compiles_queued_after_a_crash_go_to_a_new_pool() -> None:
    toolchain = GPUToolchain("cuda", 1, compile_one=compile_or_die)
    kernel = NamedVariants()
    try:
        toolchain.compile_ahead(kernel, {"M": 1}, [{"name": "crash"}], DEVICE)  # type: ignore[arg-type]
        time.sleep(2)  # the pool's one process is dead by now, and the pool knows it
        queued = toolchain.compile_ahead(kernel, {"M": 2}, [{"name": "fine"}], DEVICE)  # type: ignore[arg-type]
        errors = toolchain.compile_all(kernel, {"M": 2}, [{"name": "fine"}], DEVICE)  # type: ignore[arg-type]
        crashed = toolchain.compile_all(kernel, {"M": 1}, [{"name": "crash"}], DEVICE)  # type: ignore[arg-type]
    finally:
        toolchain.close()
    assert queued == 1 and errors == [None]
    assert crashed == [CRASHED]
