"""Reading NVIDIA cubins without a GPU (:mod:`flyconfigs.gpu.cubin`): the occupancy rules
give exactly the blocks per SM the driver reported for every candidate the sm90 tunings
recorded, and NVRTC's cubins for sm80, sm90 and sm100 give the registers, spills and
shared memory those tunings' drivers read."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from flyconfigs.errors import GPUError
from flyconfigs.gpu import CompileRequest
from flyconfigs.gpu.backend import Backend
from flyconfigs.gpu.cache import CompileCache
from flyconfigs.gpu.cubin import LIMITS, kernel_usage, max_blocks_per_sm, resources_from_cubin
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.kernels.rmsnorm.model import ROOFLINE
from flyconfigs.schema.pack import folder_artifacts
from nvrtc_helpers import needs_nvrtc

SM90 = Path(__file__).resolve().parent.parent / "artifacts" / "sm90"


@pytest.mark.slow  # reads or compiles every recorded candidate: CI runs it with the slow tests
def test_the_occupancy_rules_give_the_drivers_blocks_per_sm_for_every_recorded_sm90_candidate() -> None:
    checked = 0
    for artifact in folder_artifacts(SM90, "rmsnorm")[::9]:
        for c in artifact.candidates:
            r = c.resources
            assert r is not None and r.registers is not None and r.shared_bytes is not None
            got = max_blocks_per_sm(LIMITS["sm90"], r.registers, r.shared_bytes, ROOFLINE.block_threads(c.config))
            assert got == r.max_blocks_per_cu, (artifact.file_name(), c.config, r)
            checked += 1
    assert checked > 5000


def test_a_block_that_does_not_fit_gets_no_block() -> None:
    assert max_blocks_per_sm(LIMITS["sm80"], 255, 0, 1024) == 0  # 255 registers × 1024 threads > 64K
    assert max_blocks_per_sm(LIMITS["sm80"], 32, 200_000, 128) == 0  # more shared memory than an A100 SM has


def test_an_arch_without_limits_and_a_file_that_is_not_a_cubin_are_errors() -> None:
    with pytest.raises(GPUError, match="sm120"):
        resources_from_cubin(b"", "k", "sm120", 128)
    with pytest.raises(GPUError, match="ELF"):
        kernel_usage(b"not an elf", "k")



nvrtc = needs_nvrtc


def _backend(arch: str, tmp_path: Path) -> Backend:
    from flyconfigs.gpu.cuda import CudaBinding

    return Backend(CudaBinding(), arch=arch, cache=CompileCache(tmp_path / "cache"))


@nvrtc
@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm80", "sm90", "sm100"])
def test_a_kernels_registers_shared_memory_and_local_bytes_are_read_from_its_cubin(arch: str, tmp_path: Path) -> None:
    src = ('extern "C" __global__ void k(float* x, int i) { __shared__ float s[64]; float a[64];'
           " for (int j = 0; j < 64; ++j) a[(j * i) & 63] = x[j]; s[threadIdx.x & 63] = a[threadIdx.x & 63];"
           " __syncthreads(); x[threadIdx.x] = s[(threadIdx.x + 1) & 63]; }")
    compiled = _backend(arch, tmp_path).compile(CompileRequest(src, "k"))
    resources = resources_from_cubin(compiled.code, "k", arch, 256)
    assert resources.shared_bytes == 256, "the kernel's own 64 floats, without the reserved KiB"
    assert resources.spill_bytes and resources.spill_bytes >= 128, "a dynamically indexed array lives in local memory"
    assert resources.registers and 1 <= resources.registers <= 255
    assert resources.max_blocks_per_cu == max_blocks_per_sm(LIMITS[arch], resources.registers, 256, 256)


@pytest.mark.slow
@nvrtc
@pytest.mark.nvrtc
def test_sm90_cubins_give_what_the_tuning_drivers_read(tmp_path: Path) -> None:
    """A sample of recorded candidates recompiled: spills and shared memory as the
    driver read them; registers within a few of its count (the tunings used NVRTC
    13.0, and another release may allocate a register or two differently); blocks per SM
    exactly where the registers agree."""
    backend = _backend("sm90", tmp_path)
    rng = random.Random(5)
    measured = [a for a in folder_artifacts(SM90, "rmsnorm") if a.selection.measured]
    same = 0
    for artifact in rng.sample(measured, 4):
        name = artifact.file_name()
        ok = [c for c in artifact.candidates if c.status == "ok" and c.resources is not None]
        for c in rng.sample(ok, min(3, len(ok))):
            compiled = backend.compile(SPEC.request(c.config, artifact.key, 32))
            got = resources_from_cubin(compiled.code, compiled.lowered_name, "sm90", ROOFLINE.block_threads(c.config))
            want = c.resources
            assert want is not None and want.registers is not None and got.registers is not None
            assert (got.spill_bytes, got.shared_bytes) == (want.spill_bytes, want.shared_bytes), (name, c.config)
            assert abs(got.registers - want.registers) <= 4, (name, c.config)
            if got.registers == want.registers:
                same += 1
                assert got.max_blocks_per_cu == want.max_blocks_per_cu
    assert same >= 6
