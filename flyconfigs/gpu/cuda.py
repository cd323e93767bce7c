"""The CUDA binding: cuda-python's ``cuda.bindings.driver`` and ``nvrtc``.

Kernels load into the device's primary context, the one torch uses, so launches on a
torch stream share memory and ordering with torch's own work.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from flyconfigs.errors import BackendUnavailableError, GPURuntimeMissingError, UnknownArchError
from flyconfigs.gpu.backend import Backend, CompiledKernel, Kernel
from flyconfigs.schema.models import Device, Resources

__all__ = ["CudaBinding"]

def _modules() -> tuple[Any, Any]:
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError as exc:
        raise GPURuntimeMissingError(f"the cuda backend needs cuda-python: pip install 'flyconfigs[cuda]' ({exc})",
                                     extras=("cuda",)) from None
    return driver, nvrtc


def _include_dir() -> str | None:
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
        return str(found) if found else None
    except (ImportError, RuntimeError):
        return None


class CudaBinding:
    """cuda-python behind the :class:`~flyconfigs.gpu.backend.Binding` protocol.

    ``driver`` and ``nvrtc`` default to ``cuda.bindings``' modules; any objects with the
    same calls work (the descriptor code is tested on the CPU that way)."""

    name: Literal["cuda", "hip"] = "cuda"
    rtc_prefix = "nvrtc"
    code_getters = ("nvrtcGetCUBINSize", "nvrtcGetCUBIN")
    define = "-DFLYCONFIGS_CUDA=1"

    def __init__(self, driver: Any = None, nvrtc: Any = None) -> None:
        if driver is None or nvrtc is None:
            driver, nvrtc = _modules()
        self.api = driver
        self.rtc = nvrtc
        self._elapsed: Any = getattr(driver, "cuEventElapsedTime_v2", None) or getattr(driver, "cuEventElapsedTime", None)
        self._initialized = False
        self._launch_ex: int | None | bool = False
        include = _include_dir()
        self.default_options: tuple[str, ...] = ("-std=c++17", *((f"-I{include}",) if include else ()))

    def _check(self, result: Any, what: str) -> Any:
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != 0:
            raise BackendUnavailableError(f"{what} failed: {getattr(err, 'name', err)}")
        rest = result[1:] if isinstance(result, tuple) else ()
        return rest[0] if len(rest) == 1 else rest or None

    def _init(self) -> None:
        if not self._initialized:
            try:
                self._check(self.api.cuInit(0), "cuInit")
            except RuntimeError as exc:
                raise GPURuntimeMissingError(f"the CUDA driver is not loadable ({exc})") from None
            self._initialized = True

    def count(self) -> int:
        """How many CUDA devices the driver sees."""
        self._init()
        return int(self._check(self.api.cuDeviceGetCount(), "cuDeviceGetCount"))

    def _device(self, ordinal: int) -> Any:
        count = self.count()
        if ordinal >= count:
            raise BackendUnavailableError(f"CUDA device {ordinal} requested, {count} present")
        return self._check(self.api.cuDeviceGet(ordinal), "cuDeviceGet")

    def _attribute(self, dev: Any, name: str) -> int:
        attr = getattr(self.api.CUdevice_attribute, name)
        return int(self._check(self.api.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({name})"))

    def describe(self, ordinal: int) -> Device:
        """The descriptor of device ``ordinal`` (bandwidth from the memory clock and bus)."""
        dev = self._device(ordinal)
        raw = self._check(self.api.cuDeviceGetName(256, dev), "cuDeviceGetName")
        product = bytes(raw).split(b"\0")[0].decode().strip()
        get = self._attribute
        major = get(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
        minor = get(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
        clock_khz = get(dev, "CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE")
        bus_bits = get(dev, "CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH")
        version = int(self._check(self.api.cuDriverGetVersion(), "cuDriverGetVersion"))
        return Device(
            vendor="nvidia",
            arch=f"sm{major}{minor}",
            product=product,
            compute_units=get(dev, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            wave_size=get(dev, "CU_DEVICE_ATTRIBUTE_WARP_SIZE"),  # type: ignore[arg-type]  # validated by the model
            l2_bytes=get(dev, "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
            memory_bandwidth_gbps=clock_khz * 1e3 * 2 * bus_bits / 8 / 1e9 if clock_khz and bus_bits else None,
            driver_version=f"{version // 1000}.{version % 1000 // 10}",
            runtime_version=self.compiler_version(),
            ordinal=ordinal,
        )

    def activate(self, ordinal: int) -> None:
        """Make the device's primary context (torch's) current."""
        ctx = self._check(self.api.cuDevicePrimaryCtxRetain(self._device(ordinal)), "cuDevicePrimaryCtxRetain")
        self._check(self.api.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def compiler_version(self) -> str:
        _, major, minor = self.rtc.nvrtcVersion()
        return f"nvrtc {major}.{minor}"

    def arch_option(self, arch: str) -> str:
        m = re.fullmatch(r"sm(\d+)([a-z]?)", arch)
        if not m:
            raise UnknownArchError(f"the cuda backend compiles for smNN arches, not {arch!r}")
        return f"-arch=sm_{m.group(1)}{m.group(2)}"

    def resources(self, backend: Backend, compiled: CompiledKernel, block: int, kernel: Kernel | None) -> Resources:
        """Registers, local (spill) and shared bytes from the driver, and the occupancy."""
        if kernel is None:
            kernel = backend.load(compiled, ())
        fa = self.api.CUfunction_attribute
        f = kernel.function

        def fattr(name: str) -> int:
            return int(self._check(self.api.cuFuncGetAttribute(getattr(fa, name), f), f"cuFuncGetAttribute({name})"))

        blocks = int(self._check(self.api.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, block, 0),
                                 "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
        max_threads = self._attribute(self._device(backend.ordinal), "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR")
        return Resources(
            registers=fattr("CU_FUNC_ATTRIBUTE_NUM_REGS"),
            spill_bytes=fattr("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
            shared_bytes=fattr("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
            max_blocks_per_cu=blocks,
            occupancy=min(1.0, blocks * block / max_threads),
        )

    def destroy_program(self, program: Any) -> Any:
        return self.rtc.nvrtcDestroyProgram(program)

    def load_module(self, code: bytes) -> Any:
        return self.api.cuModuleLoadData(code)

    def unload_module(self, module: Any) -> Any:
        return self.api.cuModuleUnload(module)

    def get_function(self, module: Any, name: bytes) -> Any:
        return self.api.cuModuleGetFunction(module, name)

    def launch(self, f: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shmem: int, stream: Any,
               params: Any, extra: Any) -> Any:
        return self.api.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra or 0)

    def launch_ex_address(self) -> int | None:
        """The address of the driver's ``cuLaunchKernelEx`` (CUDA 12 ABI, legacy default
        stream), asked once through ``cuGetProcAddress``; ``None`` where the driver or
        the binding has no such entry point, and prepared launches then go through
        :meth:`launch`."""
        if self._launch_ex is False:
            found = None
            query = getattr(self.api, "cuGetProcAddress", None)
            flags = getattr(getattr(self.api, "CUdriverProcAddress_flags", None), "CU_GET_PROC_ADDRESS_LEGACY_STREAM", None)
            if query is not None and flags is not None:
                try:
                    result = query(b"cuLaunchKernelEx", 12000, flags)
                    if int(result[0]) == 0 and result[1]:
                        found = int(result[1])
                except (RuntimeError, TypeError, ValueError):
                    found = None
            self._launch_ex = found
        return self._launch_ex

    def error_name(self, code: int) -> str:
        try:
            return str(self.api.CUresult(code).name)
        except (AttributeError, ValueError):
            return f"CUresult {code}"

    def event_create(self) -> Any:
        return self.api.cuEventCreate(0)

    def event_record(self, event: Any, stream: Any) -> Any:
        return self.api.cuEventRecord(event, stream)

    def event_synchronize(self, event: Any) -> Any:
        return self.api.cuEventSynchronize(event)

    def event_elapsed(self, start: Any, end: Any) -> Any:
        return self._elapsed(start, end)

    def event_destroy(self, event: Any) -> Any:
        return self.api.cuEventDestroy(event)

    def synchronize(self) -> Any:
        return self.api.cuCtxSynchronize()
