"""The HIP binding: hip-python's ``hip`` and ``hiprtc`` modules (hip-python 10).

Compiling needs only hipRTC and works without a GPU for any ``gfx`` arch given
explicitly; everything else needs the HIP runtime and a device.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from flyconfigs.errors import BackendUnavailableError, GPURuntimeMissingError, UnknownArchError
from flyconfigs.gpu.amdgpu import LDS_BY_ARCH, LDS_PER_CU, kernel_metadata, resources_from_metadata
from flyconfigs.gpu.backend import Backend, CompiledKernel, Kernel
from flyconfigs.schema.models import Device, Resources

__all__ = ["HIP_SYMBOLS", "HipBinding", "device_from_properties"]

# Every hip-python name this backend calls: the contract test checks them.
HIP_SYMBOLS = {
    "hiprtc": [
        "hiprtcCreateProgram", "hiprtcAddNameExpression", "hiprtcCompileProgram", "hiprtcGetProgramLogSize",
        "hiprtcGetProgramLog", "hiprtcGetLoweredName", "hiprtcGetCodeSize", "hiprtcGetCode", "hiprtcDestroyProgram",
        "hiprtcVersion", "hiprtcResult",
    ],
    "hip": [
        "hipModuleLoadData", "hipModuleUnload", "hipModuleGetFunction", "hipModuleLaunchKernel", "hipEventCreate", "hipEventRecord",
        "hipEventSynchronize", "hipEventElapsedTime", "hipEventDestroy", "hipDeviceSynchronize", "hipGetDeviceProperties", "hipSetDevice",
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
        raise GPURuntimeMissingError(f"the hip backend needs hip-python: pip install 'flyconfigs[hip]' ({exc})",
                                     extras=("hip",)) from None
    return hip, hiprtc


def _guard(call: Any, what: str) -> Any:
    """Run ``call``; a missing ROCm library becomes BackendUnavailableError."""
    try:
        return call()
    except RuntimeError as exc:
        raise GPURuntimeMissingError(
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


class HipBinding:
    """hip-python behind the :class:`~flyconfigs.gpu.backend.Binding` protocol.

    ``hip`` and ``hiprtc`` default to hip-python's modules; any objects with the same
    calls work."""

    name: Literal["cuda", "hip"] = "hip"
    rtc_prefix = "hiprtc"
    code_getters = ("hiprtcGetCodeSize", "hiprtcGetCode")
    define = "-DFLYCONFIGS_HIP=1"

    def __init__(self, hip: Any = None, hiprtc: Any = None) -> None:
        if hip is None or hiprtc is None:
            hip, hiprtc = _modules()
        self.api = hip
        self._hiprtc = hiprtc
        self.rtc = _GuardedModule(hiprtc)
        include = os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "include")
        self.default_options: tuple[str, ...] = ("-std=c++17", f"-I{include}")

    @staticmethod
    def _check(result: Any, what: str) -> Any:
        if int(result[0]) != 0:
            raise BackendUnavailableError(f"{what} failed: {getattr(result[0], 'name', result[0])}")
        return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)

    def count(self) -> int:
        """How many HIP devices the runtime sees."""
        return int(self._check(_guard(self.api.hipGetDeviceCount, "hipGetDeviceCount"), "hipGetDeviceCount"))

    def describe(self, ordinal: int) -> Device:
        """The descriptor of device ``ordinal`` (see :func:`device_from_properties`)."""
        count = self.count()
        if ordinal >= count:
            raise BackendUnavailableError(f"HIP device {ordinal} requested, {count} present")
        props = self._check(_guard(lambda: self.api.hipGetDeviceProperties(ordinal), "hipGetDeviceProperties"),
                            "hipGetDeviceProperties")
        driver = str(self._check(self.api.hipDriverGetVersion(), "hipDriverGetVersion"))
        runtime = str(self._check(self.api.hipRuntimeGetVersion(), "hipRuntimeGetVersion"))
        return device_from_properties(props, ordinal, driver, runtime)

    def activate(self, ordinal: int) -> None:
        self._check(self.api.hipSetDevice(ordinal), "hipSetDevice")

    def compiler_version(self) -> str:
        result = _guard(self._hiprtc.hiprtcVersion, "hiprtcVersion")
        return f"hiprtc {result[1]}.{result[2]}"

    def arch_option(self, arch: str) -> str:
        if not arch.startswith("gfx"):
            raise UnknownArchError(f"the hip backend compiles for gfx arches, not {arch!r}")
        return f"--offload-arch={arch}"

    def resources(self, backend: Backend, compiled: CompiledKernel, block: int, kernel: Kernel | None) -> Resources:
        """From the code object's AMDGPU metadata note: no GPU needed."""
        return resources_from_metadata(kernel_metadata(compiled.code, compiled.lowered_name), block,
                                       lds_per_cu=LDS_BY_ARCH.get(compiled.arch, LDS_PER_CU))

    def destroy_program(self, program: Any) -> Any:
        # hip-python 10 crashes on hiprtcDestroyProgram(prog); a reference works.
        return self._hiprtc.hiprtcDestroyProgram(program.createRef())

    def load_module(self, code: bytes) -> Any:
        return self.api.hipModuleLoadData(code)

    def unload_module(self, module: Any) -> Any:
        return self.api.hipModuleUnload(module)

    def get_function(self, module: Any, name: bytes) -> Any:
        return self.api.hipModuleGetFunction(module, name)

    def launch(self, f: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shmem: int, stream: Any,
               params: Any, extra: Any) -> Any:
        return self.api.hipModuleLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)

    def launch_ex_address(self) -> int | None:
        """``None``: HIP launches go through hip-python's ``hipModuleLaunchKernel``.  A
        direct call into the runtime, as on CUDA, is left until it can be run on an AMD
        GPU."""
        return None

    def error_name(self, code: int) -> str:
        return f"hipError_t {code}"

    def event_create(self) -> Any:
        return self.api.hipEventCreate()

    def event_record(self, event: Any, stream: Any) -> Any:
        return self.api.hipEventRecord(event, stream)

    def event_synchronize(self, event: Any) -> Any:
        return self.api.hipEventSynchronize(event)

    def event_elapsed(self, start: Any, end: Any) -> Any:
        return self.api.hipEventElapsedTime(start, end)

    def event_destroy(self, event: Any) -> Any:
        return self.api.hipEventDestroy(event)

    def synchronize(self) -> Any:
        return self.api.hipDeviceSynchronize()


class _GuardedModule:
    """hiprtc with each call's missing-library RuntimeError made a clear error."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._module, name)
        return lambda *args: _guard(lambda: fn(*args), name)

