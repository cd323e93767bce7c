"""The cuda backend on real NVRTC (cuda-python's bindings and NVIDIA's NVRTC wheel), with no
GPU: sm90 cubins, compile errors with their log, the RMSNorm kernel's sm90-only paths
(thread-block clusters, their asynchronous exchange, cache hints) and every cluster config
the sm90 package serves.  What needs the driver (resources, loading, launching) is in
``tests/gpu``."""

from __future__ import annotations

from pathlib import Path

import pytest

from flyconfigs.errors import CompileError
from flyconfigs.gpu import CompileRequest
from flyconfigs.gpu.backend import Backend, CompiledKernel
from flyconfigs.gpu.cache import CompileCache
from flyconfigs.gpu.cuda import CudaBinding
from flyconfigs.kernels.rmsnorm import SPEC, cluster_of, hints_of
from flyconfigs.registry import DeviceQuery
from flyconfigs.schema.pack import folder_artifacts
from nvrtc_helpers import needs_nvrtc

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts" / "sm90"
H200 = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())



pytestmark = [pytest.mark.nvrtc, needs_nvrtc]


@pytest.fixture
def backend(tmp_path: Path) -> Backend:
    return Backend(CudaBinding(), arch="sm90", cache=CompileCache(tmp_path / "cache"))


def test_compile_for_sm90_without_a_gpu(backend: Backend) -> None:
    src = ('extern "C" __global__ void scale(float* x, int n, float a) '
           "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }")
    first = backend.compile(CompileRequest(src, "scale"))
    again = backend.compile(CompileRequest(src, "scale"))
    assert first.code[:4] == b"\x7fELF", "a cubin is an ELF file"
    assert (first.arch, first.lowered_name, first.from_cache) == ("sm90", "scale", False)
    assert again.from_cache and again.code == first.code


def test_a_compile_error_carries_the_log(backend: Backend) -> None:
    with pytest.raises(CompileError) as caught:
        backend.compile(CompileRequest('extern "C" __global__ void broken( { }', "broken"))
    assert "error" in caught.value.log and "sm90" in str(caught.value)


def test_the_cluster_exchange_assembles_for_every_cluster_size_dtype_and_cache_hint(backend: Backend) -> None:
    # The exchange is inline PTX (st.async, mbarrier, cluster barriers): only ptxas, run by
    # NVRTC for a cubin, checks it.  One config for each combination the space offers.
    keys = [{"M": 1, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}, {"M": 16, "N": 4096, "dtype": "fp16", "weight_dtype": "fp16"},
            {"M": 2, "N": 12288, "dtype": "bf16", "weight_dtype": "fp32"}, {"M": 1, "N": 16384, "dtype": "fp32", "weight_dtype": "fp32"}]
    requests, seen = [], set()
    for key in keys:
        for config in SPEC.space(key, H200):
            combination = (key["dtype"], key["weight_dtype"], cluster_of(config), hints_of(config))
            if combination[2] > 1 and combination not in seen:
                seen.add(combination)
                requests.append(SPEC.build(config, key, H200))
    assert {c[2] for c in seen} == {2, 4, 8} and {c[3] for c in seen} == {"none", "stream"}
    results = backend.compile_many(requests, workers=2)
    errors = [str(r)[:400] for r in results if isinstance(r, CompileError)]
    assert errors == []
    assert all(isinstance(r, CompiledKernel) and r.code[:4] == b"\x7fELF" for r in results)


def test_the_fused_residual_add_kernel_compiles_for_sm90_from_the_same_source(backend: Backend) -> None:
    """Fused add + RMSNorm's ``source`` implementation: one config of each row storage,
    cluster size, vector width and cache hint its space offers, over keys of every dtype."""
    from flyconfigs.kernels.fused_add_rmsnorm import SPEC as FUSED

    keys = [{"M": 1, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}, {"M": 16, "N": 4096, "dtype": "fp16", "weight_dtype": "fp16"},
            {"M": 4096, "N": 12288, "dtype": "bf16", "weight_dtype": "fp32"}, {"M": 77, "N": 1001, "dtype": "fp32", "weight_dtype": "fp32"},
            {"M": 3, "N": 16384, "dtype": "fp16", "weight_dtype": "fp16"}, {"M": 5, "N": 999, "dtype": "bf16", "weight_dtype": "bf16"}]
    requests, seen = [], set()
    for key in keys:
        for config in FUSED.space(key, H200):
            if config["impl"] != "source":
                continue
            combination = (config["row_storage"], config["cluster"], config["vector_bytes"], config["cache_hints"])
            if combination not in seen:
                seen.add(combination)
                request = FUSED.build(config, key, H200)
                assert request is not None and "-DFC_RESIDUAL=1" in request.options
                requests.append(request)
    assert {c[0] for c in seen} == {"reg", "smem", "reread"} and {c[1] for c in seen} >= {1, 2, 4, 8}
    assert 0 in {c[2] for c in seen} and "stream" in {c[3] for c in seen}
    assert {k["dtype"] for k in keys} == {"bf16", "fp16", "fp32"}
    results = backend.compile_many(requests, workers=2)
    errors = [str(r)[:400] for r in results if isinstance(r, CompileError)]
    assert errors == []
    assert all(isinstance(r, CompiledKernel) and r.lowered_name == "fused_add_rmsnorm_kernel" for r in results)


@pytest.mark.slow
def test_every_cluster_config_the_sm90_package_serves_compiles_from_this_source(backend: Backend) -> None:
    requests: set[CompileRequest] = set()  # M is not compiled in: keys of one row length share variants
    for artifact in folder_artifacts(ARTIFACTS, "rmsnorm"):  # the packs' rows
        if cluster_of(artifact.winner.config) > 1:
            requests.add(SPEC.build(artifact.winner.config, artifact.key, H200))
    assert len(requests) >= 20, "the package serves clusters on many keys"
    ordered = sorted(requests, key=lambda r: r.options)
    results = backend.compile_many(ordered, workers=2)
    failed = [r.options for r, result in zip(ordered, results, strict=True) if isinstance(result, CompileError)]
    assert failed == []
