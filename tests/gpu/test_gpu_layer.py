"""The GPU layer on a real device: compile, load, launch and time on a torch stream; the
compile cache; compile errors with their log; the device descriptor; resource usage."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from flyconfigs.errors import CompileError, LaunchError, UnknownArchError
from flyconfigs.gpu import CompileRequest, LaunchArgumentError, get_backend
from flyconfigs.gpu.backend import Backend
from flyconfigs.gpu.cache import CompileCache

SCALE = r"""
extern "C" __global__ void scale(float* x, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
"""
# Dynamically indexed local array under a tight register cap: it must spill.
SPILLS = r"""
extern "C" __global__ void __launch_bounds__(1024, 2) heavy(float* out, const int* idx, int n) {
  float acc[256];
  #pragma unroll 1
  for (int i = 0; i < 256; ++i) acc[i] = out[(i * 7) % n];
  float s = 0.f;
  #pragma unroll 1
  for (int i = 0; i < n; ++i) s += acc[idx[i] & 255];
  out[threadIdx.x] = s;
}
"""


@pytest.fixture
def backend(tmp_path: Path) -> Backend:
    base = get_backend()
    return Backend(base.binding, base.ordinal, cache=CompileCache(tmp_path / "cache"))


def test_compile_load_launch_time_on_a_torch_stream(backend: Backend) -> None:
    kernel = backend.load(backend.compile(CompileRequest(SCALE, "scale")), ("ptr", "i32", "f32"))
    x = torch.arange(10_000, device="cuda", dtype=torch.float32)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        ms = backend.time_ms(lambda: kernel.launch((40, 1, 1), (256, 1, 1), (x, x.numel(), 2.5), stream.cuda_stream),
                             stream.cuda_stream)
    stream.synchronize()
    assert torch.equal(x, torch.arange(10_000, device="cuda", dtype=torch.float32) * 2.5)
    assert 0 < ms < 100


def test_second_compile_is_a_cache_hit(backend: Backend, tmp_path: Path) -> None:
    first = backend.compile(CompileRequest(SCALE, "scale", ("-DUNUSED=1",)))
    again = Backend(backend.binding, backend.ordinal, cache=CompileCache(tmp_path / "cache")).compile(
        CompileRequest(SCALE, "scale", ("-DUNUSED=1",))
    )
    assert (first.from_cache, again.from_cache) == (False, True)
    assert again.code == first.code and again.lowered_name == "scale"


def test_syntax_error_is_a_compile_error_with_the_log(backend: Backend) -> None:
    with pytest.raises(CompileError) as info:
        backend.compile(CompileRequest("extern \"C\" __global__ void broken( { }", "broken"))
    assert "error" in info.value.log.lower()
    assert info.value.log in str(info.value)


def test_descriptor_matches_torch(backend: Backend) -> None:
    device = backend.device()
    props = torch.cuda.get_device_properties(0)
    assert device.vendor == "nvidia"
    assert device.arch == f"sm{props.major}{props.minor}"
    assert device.product == props.name
    assert device.compute_units == props.multi_processor_count
    assert device.wave_size == 32
    assert device.l2_bytes == props.L2_cache_size
    assert device.memory_bandwidth_gbps is not None and 500 < device.memory_bandwidth_gbps < 20_000
    assert device.driver_version and device.runtime_version.startswith("nvrtc ")
    assert device.ordinal == 0


def test_resource_usage_with_and_without_spills(backend: Backend) -> None:
    lean = backend.compile(CompileRequest(SCALE, "scale"))
    heavy = backend.compile(CompileRequest(SPILLS, "heavy", ("--maxrregcount=32",)))
    lean_r = backend.resources(lean, 256)
    heavy_r = backend.resources(heavy, 1024)
    assert lean_r.spill_bytes == 0 and lean_r.registers and lean_r.registers <= 32
    assert heavy_r.spill_bytes and heavy_r.spill_bytes >= 1024
    assert lean_r.max_blocks_per_cu and lean_r.occupancy and 0 < lean_r.occupancy <= 1


def test_bad_launches_and_arches_are_specific_errors(backend: Backend) -> None:
    kernel = backend.load(backend.compile(CompileRequest(SCALE, "scale")), ("ptr", "i32", "f32"))
    x = torch.zeros(4, device="cuda")
    with pytest.raises(LaunchArgumentError, match="takes 3 arguments"):
        kernel.launch((1, 1, 1), (4, 1, 1), (x, 4))
    with pytest.raises(LaunchArgumentError, match="argument 1 must be an int"):
        kernel.launch((1, 1, 1), (4, 1, 1), (x, 4.0, 1.0))
    with pytest.raises(LaunchArgumentError, match="argument 2 must be a float"):
        kernel.launch((1, 1, 1), (4, 1, 1), (x, 4, "2"))
    with pytest.raises(LaunchError):
        kernel.launch((1, 1, 1), (4096, 1, 1), (x, 4, 1.0))
    with pytest.raises(UnknownArchError):
        Backend(backend.binding, arch="gfx942").compile(CompileRequest(SCALE, "scale"))


def test_parallel_compilation(backend: Backend) -> None:
    requests = [CompileRequest(SCALE, "scale", (f"-DVARIANT={i}",)) for i in range(16)]
    results = backend.compile_many(requests, workers=8)
    assert all(not isinstance(r, Exception) and not r.from_cache for r in results)
    assert len({r.cache_key for r in results}) == 16
