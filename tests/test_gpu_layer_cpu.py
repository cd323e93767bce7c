"""The GPU layer without a GPU: the hip-python contract, absent runtimes, argument
packing, the compile cache, and AMD device descriptors."""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from flyconfigs.errors import BackendUnavailableError, UnknownArchError
from flyconfigs.gpu import LaunchArgumentError, get_backend
from flyconfigs.gpu.backend import fill_arguments
from flyconfigs.gpu.cache import CompileCache
from flyconfigs.gpu.hip import HIP_SYMBOLS, device_from_properties


def test_every_hip_python_name_the_backend_uses_exists() -> None:
    hip = pytest.importorskip("hip")
    from hip import hip as hip_mod
    from hip import hiprtc

    modules = {"hip": hip_mod, "hiprtc": hiprtc}
    missing = [f"{m}.{n}" for m, names in HIP_SYMBOLS.items() for n in names if not hasattr(modules[m], n)]
    assert missing == [], missing
    assert hip is not None


def test_without_a_hip_runtime_the_backend_says_so() -> None:
    pytest.importorskip("hip")
    code = (
        "from flyconfigs.gpu import get_backend\n"
        "from flyconfigs.errors import BackendUnavailableError\n"
        "try:\n    get_backend('hip').device()\nexcept BackendUnavailableError as e:\n    print('UNAVAILABLE', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "ROCM_PATH")}
    env["ROCM_PATH"] = "/nonexistent"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.startswith("UNAVAILABLE"), done.stderr
    assert "HIP runtime libraries are not loadable" in done.stdout and "rocm-prefix.sh" in done.stdout


def test_auto_selection_without_any_gpu_names_every_reason() -> None:
    with pytest.raises(BackendUnavailableError, match="no GPU backend is usable: cuda: .*hip: "):
        get_backend(ordinal=7)
    with pytest.raises(BackendUnavailableError, match="unknown backend 'opencl'"):
        get_backend("opencl")


def test_unknown_arch_is_refused_before_compiling() -> None:
    pytest.importorskip("hip")
    backend = get_backend("hip", arch="sm90")
    from flyconfigs.gpu import CompileRequest

    with pytest.raises(UnknownArchError, match="gfx arches, not 'sm90'"):
        backend.compile(CompileRequest("x", "k"))


def test_argument_packing_checks_count_kinds_and_ranges() -> None:
    signature = ("ptr", "i32", "i64", "f32")
    slots = [ctypes.c_void_p(0), ctypes.c_int32(0), ctypes.c_int64(0), ctypes.c_float(0)]
    tensor = SimpleNamespace(data_ptr=lambda: 0xDEAD0000)
    fill_arguments(signature, slots, (tensor, -5, 2**40, 1))
    assert (slots[0].value, slots[1].value, slots[2].value, slots[3].value) == (0xDEAD0000, -5, 2**40, 1.0)
    with pytest.raises(LaunchArgumentError, match="takes 4 arguments"):
        fill_arguments(signature, slots, (1, 2, 3))
    with pytest.raises(LaunchArgumentError, match="argument 1 must be an int"):
        fill_arguments(signature, slots, (1, True, 3, 1.0))
    with pytest.raises(LaunchArgumentError, match="does not fit i32"):
        fill_arguments(signature, slots, (1, 2**31, 3, 1.0))
    with pytest.raises(LaunchArgumentError, match="argument 3 must be a float"):
        fill_arguments(signature, slots, (1, 2, 3, "1.0"))
    with pytest.raises(LaunchArgumentError, match="argument 0 = -1 does not fit ptr"):
        fill_arguments(signature, slots, (-1, 2, 3, 1.0))


def _total(root: Path) -> str:
    """The running total a cache keeps in its lock file (written twice, as a check)."""
    first, second = (root / ".lock").read_text().split()
    assert first == second
    return str(int(first))


def test_compile_cache_round_trip_lru_eviction_and_torn_entries(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path, max_bytes=3000)
    for i in range(3):
        cache.put(f"{i:02d}" + "a" * 62, bytes([i]) * 1000, {"lowered_name": f"k{i}"})
        os.utime(next(tmp_path.glob(f"*/{i:02d}*.bin")), (1000 + i, 1000 + i))
    assert cache.get("00" + "a" * 62)[1]["lowered_name"] == "k0"  # refreshes entry 0
    cache.put("03" + "a" * 62, b"x" * 1000, {"lowered_name": "k3"})
    assert cache.get("01" + "a" * 62) is None, "the least recently used entry goes first"
    assert cache.get("00" + "a" * 62) is not None and cache.get("03" + "a" * 62) is not None
    assert cache.size() <= 3000
    meta = next(tmp_path.glob("03/*.json"))
    meta.write_text('{"size": 5}')
    assert cache.get("03" + "a" * 62) is None


def test_compile_cache_keeps_a_running_total_and_scans_only_past_its_cap(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path, max_bytes=10_000)
    scans: list[int] = []
    real_scan = cache._evict_locked

    def counted_scan(lock: int) -> list[str]:
        scans.append(1)
        return real_scan(lock)

    cache._evict_locked = counted_scan  # type: ignore[method-assign]
    cache.put("00" + "c" * 62, b"a" * 3000, {"lowered_name": "k0"})
    assert len(scans) == 1, "with no running total yet, the first store scans and records one"
    for i in range(1, 3):
        cache.put(f"{i:02d}" + "c" * 62, b"a" * 3000, {"lowered_name": f"k{i}"})
    assert len(scans) == 1, "stores under the cap add to the total without scanning the entries"
    assert _total(tmp_path) == "9000" == str(cache.size())
    cache.put("03" + "c" * 62, b"a" * 3000, {"lowered_name": "k3"})
    assert len(scans) == 2 and cache.size() <= 10_000, "the store that passes the cap scans and evicts"
    assert _total(tmp_path) == str(cache.size())
    (tmp_path / ".lock").write_text("garbled")
    cache.put("04" + "c" * 62, b"a" * 10, {"lowered_name": "k4"})
    assert len(scans) == 3 and _total(tmp_path) == str(cache.size()), "an unreadable total is rebuilt"


def test_compile_cache_total_counts_a_re_stored_key_once(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path, max_bytes=10_000)
    key = "00" + "d" * 62
    cache.put("01" + "d" * 62, b"b" * 1000, {"lowered_name": "other"})
    for _ in range(5):
        cache.put(key, b"a" * 3000, {"lowered_name": "k"})
    assert _total(tmp_path) == "4000" == str(cache.size())
    cache.put(key, b"a" * 2000, {"lowered_name": "k"})  # replaced by a smaller code object
    assert _total(tmp_path) == "3000" == str(cache.size())
    assert cache.get(key) == (b"a" * 2000, {"lowered_name": "k", "size": 2000,
                                            "sha256": hashlib.sha256(b"a" * 2000).hexdigest()})


def test_compile_cache_concurrent_writers_leave_whole_entries(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path, max_bytes=1 << 30)
    payload = os.urandom(200_000)
    threads = [threading.Thread(target=cache.put, args=("ff" + "b" * 62, payload, {"lowered_name": "k"})) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    code, meta = cache.get("ff" + "b" * 62)
    assert code == payload and meta["size"] == len(payload)
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_compile_cache_writes_an_entry_before_it_takes_the_lock(tmp_path: Path) -> None:
    """A store writes its data while another process holds the cache's lock: only the
    renames and the running total wait for it, so concurrent stores are not serialised."""
    import fcntl

    cache = CompileCache(tmp_path, max_bytes=1 << 30)
    key = "ab" + "e" * 62
    with open(tmp_path / ".lock", "a+b") as other:  # its own open file: flock excludes it
        fcntl.flock(other, fcntl.LOCK_EX)
        store = threading.Thread(target=cache.put, args=(key, b"c" * 5000, {"lowered_name": "k"}))
        store.start()
        staged: list[Path] = []
        for _ in range(1000):
            staged = sorted(p for p in (tmp_path / "ab").glob(".*.tmp") if p.stat().st_size) if (tmp_path / "ab").exists() else []
            if len(staged) == 2:
                break
            store.join(0.01)
        assert len(staged) == 2, "both files are written while the lock is held elsewhere"
        assert store.is_alive() and cache.get(key) is None, "the entry appears only under the lock"
        fcntl.flock(other, fcntl.LOCK_UN)
    store.join(30)
    assert not store.is_alive()
    assert cache.get(key) == (b"c" * 5000, {"lowered_name": "k", "size": 5000,
                                            "sha256": hashlib.sha256(b"c" * 5000).hexdigest()})
    assert _total(tmp_path) == "5000" and not list(tmp_path.rglob("*.tmp"))


def _store_many(root: str, seed: int) -> None:
    cache = CompileCache(Path(root), max_bytes=1 << 30)
    for i in range(300):
        # The same 300 keys from both processes, of sizes that differ between them.
        cache.put(hashlib.sha256(f"{i}".encode()).hexdigest(), bytes([seed]) * (1000 + seed * 7 + i),
                  {"lowered_name": f"k{seed}"})


def test_compile_cache_two_processes_storing_the_same_keys_at_once(tmp_path: Path) -> None:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_store_many, args=(str(tmp_path), seed)) for seed in (1, 2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    cache = CompileCache(tmp_path, max_bytes=1 << 30)
    for i in range(300):
        got = cache.get(hashlib.sha256(f"{i}".encode()).hexdigest())
        assert got is not None, "each entry's code and metadata come from one store"
        code, meta = got
        seed = code[0]
        assert code == bytes([seed]) * (1000 + seed * 7 + i) and meta["lowered_name"] == f"k{seed}"
    assert _total(tmp_path) == str(cache.size()), "each key counted once in the running total"
    assert not list(tmp_path.rglob("*.tmp"))


def test_amd_descriptor_from_properties() -> None:
    """A stand-in for hipDeviceProp_t: there is no AMD GPU here to read real ones from."""
    props = SimpleNamespace(name="AMD Instinct MI300X", gcnArchName="gfx942:sramecc+:xnack-", multiProcessorCount=304,
                            warpSize=64, l2CacheSize=4194304, memoryClockRate=1300000, memoryBusWidth=8192)
    device = device_from_properties(props, 3, "60342131", "60342131")
    assert (device.vendor, device.arch, device.features, device.compute_units, device.wave_size) == (
        "amd", "gfx942", ["sramecc+", "xnack-"], 304, 64)
    assert device.memory_bandwidth_gbps == 5300.0 and device.ordinal == 3
    other = device_from_properties(SimpleNamespace(**{**props.__dict__, "name": "AMD Radeon PRO W7900",
                                                       "gcnArchName": "gfx1100", "warpSize": 32}), 0, None, None)
    assert other.features == [] and other.memory_bandwidth_gbps == pytest.approx(1300000e3 * 2 * 8192 / 8 / 1e9)


def test_nvidia_descriptor_from_driver_attributes() -> None:
    """A stand-in for cuda.bindings.driver with the H200's attributes (no GPU here; the
    GPU tests compare the real descriptor with torch's device properties)."""
    from flyconfigs.gpu.cuda import CudaBinding

    values = {"COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0, "MEMORY_CLOCK_RATE": 3201000,
              "GLOBAL_MEMORY_BUS_WIDTH": 6016, "MULTIPROCESSOR_COUNT": 132, "WARP_SIZE": 32,
              "L2_CACHE_SIZE": 62914560}

    class Attributes:
        def __getattr__(self, name: str) -> str:
            return name.removeprefix("CU_DEVICE_ATTRIBUTE_")

    driver = SimpleNamespace(
        CUdevice_attribute=Attributes(),
        cuInit=lambda flags: (0,),
        cuDeviceGetCount=lambda: (0, 2),
        cuDeviceGet=lambda ordinal: (0, f"dev{ordinal}"),
        cuDeviceGetName=lambda size, dev: (0, b"NVIDIA H200\0\0\0"),
        cuDeviceGetAttribute=lambda attr, dev: (0, values[attr]),
        cuDriverGetVersion=lambda: (0, 13000),
    )
    nvrtc = SimpleNamespace(nvrtcVersion=lambda: (0, 13, 0))
    device = CudaBinding(driver, nvrtc).describe(1)
    assert (device.arch, device.product, device.compute_units, device.wave_size, device.ordinal) == (
        "sm90", "NVIDIA H200", 132, 32, 1)
    assert device.memory_bandwidth_gbps == pytest.approx(3201000e3 * 2 * 6016 / 8 / 1e9)
    assert (device.driver_version, device.runtime_version) == ("13.0", "nvrtc 13.0")
    with pytest.raises(BackendUnavailableError, match="device 5 requested, 2 present"):
        CudaBinding(driver, nvrtc).describe(5)


class _RecordingBinding:
    """Stands in for a driver (no GPU here): records each launch with the arguments it
    finds behind the parameter array, and answers ``fail_with``."""

    name = "cuda"

    def __init__(self, fail_with: int = 0) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.fail_with = fail_with

    def launch(self, *args: object) -> tuple[int]:
        params = ctypes.cast(args[-2], ctypes.POINTER(ctypes.c_void_p))
        seen = (ctypes.c_void_p.from_address(params[0]).value, ctypes.c_int32.from_address(params[1]).value,
                ctypes.c_float.from_address(params[2]).value)
        self.calls.append((*args[:-2], seen))
        return (self.fail_with,)


def _kernel(binding: object) -> object:
    from flyconfigs.gpu.backend import Backend, CompiledKernel, CompileRequest, Kernel

    compiled = CompiledKernel(CompileRequest("", "k"), "sm90", b"", "k_lowered", "", "key", False)
    return Kernel(compiled, None, "function-handle", ("ptr", "i32", "f32"), Backend(binding))  # type: ignore[arg-type]


def test_a_prepared_launch_passes_geometry_arguments_and_stream() -> None:
    binding = _RecordingBinding()
    kernel = _kernel(binding)
    launch = kernel.prepare((3, 1, 1), (128, 1, 1), 64)  # type: ignore[attr-defined]
    launch((0x7000, 5, 0.5), 42)
    launch((0x8000, -1, 2.0), None)
    kernel.launch((1, 1, 1), (32, 1, 1), (0x9000, 7, 1.5))  # type: ignore[attr-defined]  # the checked path, same slots
    assert binding.calls == [
        ("function-handle", 3, 1, 1, 128, 1, 1, 64, 42, (0x7000, 5, 0.5)),
        ("function-handle", 3, 1, 1, 128, 1, 1, 64, 0, (0x8000, -1, 2.0)),
        ("function-handle", 1, 1, 1, 32, 1, 1, 0, 0, (0x9000, 7, 1.5)),
    ]


def test_a_prepared_launch_checks_geometry_once_arguments_always_and_reports_a_refused_launch() -> None:
    from flyconfigs.errors import LaunchError

    kernel = _kernel(_RecordingBinding(fail_with=700))
    with pytest.raises(LaunchArgumentError, match="three positive ints"):
        kernel.prepare((0, 1, 1), (128, 1, 1))  # type: ignore[attr-defined]
    with pytest.raises(LaunchArgumentError, match="shared_bytes"):
        kernel.prepare((1, 1, 1), (128, 1, 1), -4)  # type: ignore[attr-defined]
    launch = kernel.prepare((1, 1, 1), (128, 1, 1))  # type: ignore[attr-defined]
    with pytest.raises(LaunchError, match="launching k_lowered failed: 700"):
        launch((0, 1, 1.0), 0)
    for bad in ((0, 1.5, 1.0), (0, 2**31, 1.0), (-1, 1, 1.0), (0, 1)):
        with pytest.raises(LaunchArgumentError, match="do not fit"):
            launch(bad, 0)


class _DirectBinding(_RecordingBinding):
    """A driver whose ``cuLaunchKernelEx`` is a C-callable Python function (no GPU here):
    it reads the launch config and the arguments behind the parameter array, as the
    driver does, and answers ``fail_with``."""

    def __init__(self, fail_with: int = 0) -> None:
        super().__init__(fail_with)
        from flyconfigs.gpu.backend import LaunchConfig

        def launch_ex(config: int, function: int, params: int, extra: int | None) -> int:
            c = LaunchConfig.from_address(config)
            slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
            seen = (ctypes.c_void_p.from_address(slots[0]).value, ctypes.c_int32.from_address(slots[1]).value,
                    ctypes.c_float.from_address(slots[2]).value)
            self.calls.append((function, c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY, c.blockDimZ,
                               c.sharedMemBytes, c.hStream or 0, c.attrs, c.numAttrs, extra, seen))
            return self.fail_with

        prototype = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        self._entry = prototype(launch_ex)  # kept alive as long as the binding
        self.launch_ex_address = lambda: ctypes.cast(self._entry, ctypes.c_void_p).value

    def error_name(self, code: int) -> str:
        return f"CUDA_ERROR_{code}"


def test_a_direct_launch_hands_the_driver_the_config_stream_and_arguments() -> None:
    from flyconfigs.gpu.backend import Backend, CompiledKernel, CompileRequest, Kernel

    binding = _DirectBinding()
    compiled = CompiledKernel(CompileRequest("", "k"), "sm90", b"", "k_lowered", "", "key", False)
    kernel = Kernel(compiled, None, 0xF00D, ("ptr", "i32", "f32"), Backend(binding))  # type: ignore[arg-type]
    launch = kernel.prepare((3, 2, 1), (128, 1, 1), 64)
    other = kernel.prepare((1, 1, 1), (32, 1, 1))
    launch((0x7000, 5, 0.5), 42)
    other((0x9000, 7, 1.5), 0x1234)
    launch((0x8000, -1, 2.0), None)
    assert binding.calls == [
        (0xF00D, 3, 2, 1, 128, 1, 1, 64, 42, None, 0, None, (0x7000, 5, 0.5)),
        (0xF00D, 1, 1, 1, 32, 1, 1, 0, 0x1234, None, 0, None, (0x9000, 7, 1.5)),
        (0xF00D, 3, 2, 1, 128, 1, 1, 64, 0, None, 0, None, (0x8000, -1, 2.0)),
    ]


def test_a_direct_launch_checks_arguments_and_names_a_refused_launch() -> None:
    from flyconfigs.errors import LaunchError
    from flyconfigs.gpu.backend import Backend, CompiledKernel, CompileRequest, Kernel

    binding = _DirectBinding(fail_with=700)
    compiled = CompiledKernel(CompileRequest("", "k"), "sm90", b"", "k_lowered", "", "key", False)
    kernel = Kernel(compiled, None, 0xF00D, ("ptr", "i32", "f32"), Backend(binding))  # type: ignore[arg-type]
    launch = kernel.prepare((1, 1, 1), (128, 1, 1))
    with pytest.raises(LaunchError, match=r"launching k_lowered failed: CUDA_ERROR_700 \(700\)"):
        launch((0, 1, 1.0), 0)
    calls = len(binding.calls)
    for bad in ((0, 1.5, 1.0), (0, 2**31, 1.0), (-1, 1, 1.0), (0, 1)):
        with pytest.raises(LaunchArgumentError, match="do not fit"):
            launch(bad, 0)
    assert len(binding.calls) == calls  # nothing reached the driver


def test_the_cuda_binding_finds_the_direct_launch_entry_once_or_falls_back() -> None:
    """Stand-ins for cuda.bindings.driver (no GPU here); the GPU tests launch through
    the real entry point."""
    from flyconfigs.gpu.cuda import CudaBinding

    asked: list[tuple[object, ...]] = []
    flags = SimpleNamespace(CU_GET_PROC_ADDRESS_LEGACY_STREAM="legacy")

    def found(*args: object) -> tuple[int, int, int]:
        asked.append(args)
        return (0, 0xABC0, 0)

    nvrtc = SimpleNamespace()
    binding = CudaBinding(SimpleNamespace(cuGetProcAddress=found, CUdriverProcAddress_flags=flags), nvrtc)
    assert binding.launch_ex_address() == 0xABC0 and binding.launch_ex_address() == 0xABC0
    assert asked == [(b"cuLaunchKernelEx", 12000, "legacy")]
    for answer in ((0, 0, 1), (500,)):
        driver = SimpleNamespace(cuGetProcAddress=lambda *a, r=answer: r, CUdriverProcAddress_flags=flags)
        assert CudaBinding(driver, nvrtc).launch_ex_address() is None
    assert CudaBinding(SimpleNamespace(), nvrtc).launch_ex_address() is None


def test_each_vendor_runs_on_one_backend() -> None:
    from flyconfigs.gpu import backend_for_vendor

    assert (backend_for_vendor("amd"), backend_for_vendor("nvidia")) == ("hip", "cuda")
