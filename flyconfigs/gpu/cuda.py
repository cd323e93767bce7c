"""The CUDA binding: cuda-python's ``cuda.bindings.driver`` and ``nvrtc``.

Kernels load into the device's primary context, the one torch uses, so launches on a
torch stream share memory and ordering with torch's own work.
"""

from __future__ import annotations

import re
from typing import Any

from flyconfigs.errors import BackendUnavailableError, UnknownArchError
from flyconfigs.gpu.backend import Backend, Binding, CompiledKernel, Kernel
from flyconfigs.schema.models import Device, Resources

__all__ = ["CUDA_SYMBOLS", "make_binding"]

CUDA_SYMBOLS = {
    "nvrtc": [
        "nvrtcCreateProgram", "nvrtcAddNameExpression", "nvrtcCompileProgram", "nvrtcGetProgramLogSize",
        "nvrtcGetProgramLog", "nvrtcGetLoweredName", "nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcDestroyProgram",
        "nvrtcVersion",
    ],
    "driver": [
        "cuInit", "cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetName", "cuDeviceGetAttribute", "cuDriverGetVersion",
        "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuModuleLoadData", "cuModuleGetFunction", "cuLaunchKernel",
        "cuEventCreate", "cuEventRecord", "cuEventSynchronize", "cuCtxSynchronize", "cuFuncGetAttribute",
        "cuOccupancyMaxActiveBlocksPerMultiprocessor", "CUdevice_attribute", "CUfunction_attribute",
    ],
}


def _modules() -> tuple[Any, Any]:
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError as exc:
        raise BackendUnavailableError(f"the cuda backend needs cuda-python: pip install 'flyconfigs[cuda]' ({exc})") from None
    return driver, nvrtc


def _include_dir() -> str | None:
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
        return str(found) if found else None
    except (ImportError, RuntimeError):
        return None


def make_binding() -> Binding:
    """The cuda-python binding; :class:`BackendUnavailableError` if it is absent."""
    driver, nvrtc = _modules()
    state: dict[str, Any] = {}
    attr = driver.CUdevice_attribute

    def check(result: Any, what: str) -> Any:
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != 0:
            raise BackendUnavailableError(f"{what} failed: {getattr(err, 'name', err)}")
        rest = result[1:] if isinstance(result, tuple) else ()
        return rest[0] if len(rest) == 1 else rest or None

    def init() -> None:
        if "init" not in state:
            try:
                check(driver.cuInit(0), "cuInit")
            except RuntimeError as exc:
                raise BackendUnavailableError(f"the CUDA driver is not loadable ({exc})") from None
            state["init"] = True

    def count() -> int:
        init()
        return int(check(driver.cuDeviceGetCount(), "cuDeviceGetCount"))

    def device_handle(ordinal: int) -> Any:
        init()
        count = check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
        if ordinal >= int(count):
            raise BackendUnavailableError(f"CUDA device {ordinal} requested, {count} present")
        return check(driver.cuDeviceGet(ordinal), "cuDeviceGet")

    def get(dev: Any, name: str) -> int:
        return int(check(driver.cuDeviceGetAttribute(getattr(attr, name), dev), f"cuDeviceGetAttribute({name})"))

    def describe(ordinal: int) -> Device:
        dev = device_handle(ordinal)
        raw = check(driver.cuDeviceGetName(256, dev), "cuDeviceGetName")
        product = bytes(raw).split(b"\0")[0].decode().strip()
        major = get(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
        minor = get(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
        clock_khz = get(dev, "CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE")
        bus_bits = get(dev, "CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH")
        version = int(check(driver.cuDriverGetVersion(), "cuDriverGetVersion"))
        return Device(
            vendor="nvidia",
            arch=f"sm{major}{minor}",
            product=product,
            compute_units=get(dev, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            wave_size=get(dev, "CU_DEVICE_ATTRIBUTE_WARP_SIZE"),  # type: ignore[arg-type]  # validated by the model
            l2_bytes=get(dev, "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
            memory_bandwidth_gbps=clock_khz * 1e3 * 2 * bus_bits / 8 / 1e9 if clock_khz and bus_bits else None,
            driver_version=f"{version // 1000}.{version % 1000 // 10}",
            runtime_version=compiler_version(),
            ordinal=ordinal,
        )

    def activate(ordinal: int) -> None:
        dev = device_handle(ordinal)
        ctx = check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def compiler_version() -> str:
        _, major, minor = nvrtc.nvrtcVersion()
        return f"nvrtc {major}.{minor}"

    def arch_option(arch: str) -> str:
        m = re.fullmatch(r"sm(\d+)([a-z]?)", arch)
        if not m:
            raise UnknownArchError(f"the cuda backend compiles for smNN arches, not {arch!r}")
        return f"-arch=sm_{m.group(1)}{m.group(2)}"

    def resources(backend: Backend, compiled: CompiledKernel, block: int, kernel: Kernel | None) -> Resources:
        if kernel is None:
            kernel = backend.load(compiled, ())
        fa = driver.CUfunction_attribute
        f = kernel.function

        def fattr(name: str) -> int:
            return int(check(driver.cuFuncGetAttribute(getattr(fa, name), f), f"cuFuncGetAttribute({name})"))

        regs = fattr("CU_FUNC_ATTRIBUTE_NUM_REGS")
        local = fattr("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES")
        shared = fattr("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        blocks = int(check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, block, 0), "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
        dev = device_handle(backend.ordinal)
        max_threads = get(dev, "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR")
        return Resources(
            registers=regs,
            spill_bytes=local,
            shared_bytes=shared,
            max_blocks_per_cu=blocks,
            occupancy=min(1.0, blocks * block / max_threads),
        )

    elapsed = getattr(driver, "cuEventElapsedTime_v2", None) or driver.cuEventElapsedTime
    include = _include_dir()
    return Binding(
        name="cuda",
        rtc=nvrtc,
        api=driver,
        rtc_prefix="nvrtc",
        code_getters=("nvrtcGetCUBINSize", "nvrtcGetCUBIN"),
        arch_option=arch_option,
        define="-DFLYCONFIGS_CUDA=1",
        destroy_program=nvrtc.nvrtcDestroyProgram,
        load_module=driver.cuModuleLoadData,
        get_function=driver.cuModuleGetFunction,
        launch=lambda f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra: driver.cuLaunchKernel(
            f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra or 0
        ),
        event_create=lambda: driver.cuEventCreate(0),
        event_record=driver.cuEventRecord,
        event_synchronize=driver.cuEventSynchronize,
        event_elapsed=elapsed,
        event_destroy=driver.cuEventDestroy,
        synchronize=driver.cuCtxSynchronize,
        compiler_version=compiler_version,
        describe=describe,
        activate=activate,
        resources=resources,
        count=count,
        default_options=("-std=c++17", *((f"-I{include}",) if include else ())),
    )

