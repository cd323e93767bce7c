"""The HIP binding: hip-python's ``hip`` and ``hiprtc`` modules (hip-python 10).

Compiling needs only hipRTC and works without a GPU for any ``gfx`` arch given
explicitly; everything else needs the HIP runtime and a device.
"""

from __future__ import annotations

import os
from typing import Any

from flyconfigs.errors import BackendUnavailableError, UnknownArchError
from flyconfigs.gpu.amdgpu import kernel_metadata, resources_from_metadata
from flyconfigs.gpu.backend import Backend, Binding, CompiledKernel, Kernel
from flyconfigs.schema.models import Device, Resources

__all__ = ["HIP_SYMBOLS", "device_from_properties", "make_binding"]

# Every hip-python name this backend calls: the contract test checks them.
HIP_SYMBOLS = {
    "hiprtc": [
        "hiprtcCreateProgram", "hiprtcAddNameExpression", "hiprtcCompileProgram", "hiprtcGetProgramLogSize",
        "hiprtcGetProgramLog", "hiprtcGetLoweredName", "hiprtcGetCodeSize", "hiprtcGetCode", "hiprtcDestroyProgram",
        "hiprtcVersion", "hiprtcResult",
    ],
    "hip": [
        "hipModuleLoadData", "hipModuleGetFunction", "hipModuleLaunchKernel", "hipEventCreate", "hipEventRecord",
        "hipEventSynchronize", "hipEventElapsedTime", "hipDeviceSynchronize", "hipGetDeviceProperties", "hipSetDevice",
        "hipDriverGetVersion", "hipRuntimeGetVersion", "hipGetDeviceCount", "hipError_t",
    ],
}

# Peak bandwidth from the datasheet where the properties' clock × bus width does not
# give it (MI300-class HBM3 reports a clock that needs a different factor).
DATASHEET_GBPS = {"AMD Instinct MI300X": 5300.0, "AMD Instinct MI300A": 5300.0, "AMD Instinct MI325X": 6000.0}


def _modules() -> tuple[Any, Any]:
    try:
        from hip import hip, hiprtc
    except ImportError as exc:
        raise BackendUnavailableError(f"the hip backend needs hip-python: pip install 'flyconfigs[hip]' ({exc})") from None
    return hip, hiprtc


def _guard(call: Any, what: str) -> Any:
    """Run ``call``; a missing ROCm library becomes BackendUnavailableError."""
    try:
        return call()
    except RuntimeError as exc:
        raise BackendUnavailableError(
            f"{what}: the HIP runtime libraries are not loadable ({exc}); install ROCm, set ROCM_PATH, "
            "or for compile-only use run Python through scripts/rocm-prefix.sh's prefix"
        ) from None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def device_from_properties(props: Any, ordinal: int, driver: str | None, runtime: str | None) -> Device:
    """A descriptor from ``hipDeviceProp_t``-like properties."""
    gcn = _text(props.gcnArchName)
    arch, *features = gcn.split(":")
    product = _text(props.name).strip() or arch
    bus_bits = int(getattr(props, "memoryBusWidth", 0) or 0)
    clock_khz = int(getattr(props, "memoryClockRate", 0) or 0)
    bandwidth = DATASHEET_GBPS.get(product) or (clock_khz * 1e3 * 2 * bus_bits / 8 / 1e9 if bus_bits and clock_khz else None)
    return Device(
        vendor="amd",
        arch=arch,
        product=product,
        compute_units=int(props.multiProcessorCount),
        features=sorted(set(features)),
        wave_size=int(props.warpSize),  # type: ignore[arg-type]  # validated by the model
        l2_bytes=int(props.l2CacheSize) or None,
        memory_bandwidth_gbps=bandwidth,
        driver_version=driver,
        runtime_version=runtime,
        ordinal=ordinal,
    )


def make_binding() -> Binding:
    """The hip-python binding; :class:`BackendUnavailableError` if hip-python is absent."""
    hip, hiprtc = _modules()

    def check(result: Any, what: str) -> Any:
        if int(result[0]) != 0:
            raise BackendUnavailableError(f"{what} failed: {getattr(result[0], 'name', result[0])}")
        return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)

    def describe(ordinal: int) -> Device:
        count = check(_guard(hip.hipGetDeviceCount, "hipGetDeviceCount"), "hipGetDeviceCount")
        if ordinal >= int(count):
            raise BackendUnavailableError(f"HIP device {ordinal} requested, {count} present")
        props = check(_guard(lambda: hip.hipGetDeviceProperties(ordinal), "hipGetDeviceProperties"), "hipGetDeviceProperties")
        driver = str(check(hip.hipDriverGetVersion(), "hipDriverGetVersion"))
        runtime = str(check(hip.hipRuntimeGetVersion(), "hipRuntimeGetVersion"))
        return device_from_properties(props, ordinal, driver, runtime)

    def count() -> int:
        return int(check(_guard(hip.hipGetDeviceCount, "hipGetDeviceCount"), "hipGetDeviceCount"))

    def compiler_version() -> str:
        result = _guard(hiprtc.hiprtcVersion, "hiprtcVersion")
        return f"hiprtc {result[1]}.{result[2]}"

    def arch_option(arch: str) -> str:
        if not arch.startswith("gfx"):
            raise UnknownArchError(f"the hip backend compiles for gfx arches, not {arch!r}")
        return f"--offload-arch={arch}"

    def resources(backend: Backend, compiled: CompiledKernel, block: int, kernel: Kernel | None) -> Resources:
        return resources_from_metadata(kernel_metadata(compiled.code, compiled.lowered_name), block)

    include = os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "include")
    return Binding(
        name="hip",
        rtc=_GuardedModule(hiprtc),
        api=hip,
        rtc_prefix="hiprtc",
        code_getters=("hiprtcGetCodeSize", "hiprtcGetCode"),
        arch_option=arch_option,
        define="-DFLYCONFIGS_HIP=1",
        # hip-python 10 crashes on hiprtcDestroyProgram(prog); a reference works.
        destroy_program=lambda prog: hiprtc.hiprtcDestroyProgram(prog.createRef()),
        load_module=hip.hipModuleLoadData,
        get_function=hip.hipModuleGetFunction,
        launch=lambda f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra: hip.hipModuleLaunchKernel(
            f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra
        ),
        event_create=hip.hipEventCreate,
        event_record=hip.hipEventRecord,
        event_synchronize=hip.hipEventSynchronize,
        event_elapsed=hip.hipEventElapsedTime,
        event_destroy=hip.hipEventDestroy,
        synchronize=hip.hipDeviceSynchronize,
        compiler_version=compiler_version,
        describe=describe,
        activate=lambda ordinal: check(hip.hipSetDevice(ordinal), "hipSetDevice"),
        resources=resources,
        count=count,
        default_options=("-std=c++17", f"-I{include}"),
    )


class _GuardedModule:
    """hiprtc with each call's missing-library RuntimeError made a clear error."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._module, name)
        return lambda *args: _guard(lambda: fn(*args), name)

