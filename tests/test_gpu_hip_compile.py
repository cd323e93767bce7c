"""The hip backend on real hipRTC (hip-python 10, Debian's ROCm 5.7.1 libraries in the
compile-only prefix), with no AMD GPU: gfx942 compiles, resource usage from the code
object's metadata note, compile errors with their log, every RMSNorm config of the space."""

from __future__ import annotations

import os

import pytest

from hiprtc_helpers import needs_prefix, run_in_prefix

pytestmark = [pytest.mark.hiprtc, needs_prefix]

COMMON = """
import json
from flyconfigs.gpu import CompileRequest, get_backend
backend = get_backend("hip", arch="gfx942")
"""


def test_compile_for_gfx942_and_read_resources() -> None:
    out = run_in_prefix(COMMON + r'''
src = 'extern "C" __global__ void scale(float* x, int n, float a) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }'
lean = backend.compile(CompileRequest(src, "scale"))
heavy_src = """
extern "C" __global__ void __attribute__((amdgpu_flat_work_group_size(1, 256))) heavy(float* out, const int* idx, int n) {
  float acc[512];
  for (int i = 0; i < 512; ++i) acc[i] = out[(i * 7) % n];
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += acc[idx[i] & 511];
  out[threadIdx.x] = s;
}"""
heavy = backend.compile(CompileRequest(heavy_src, "heavy"))
again = backend.compile(CompileRequest(src, "scale"))
r1, r2 = backend.resources(lean, 256), backend.resources(heavy, 256)
print(json.dumps({"magic": lean.code[:4].hex(), "name": lean.lowered_name, "lean": r1.model_dump(), "heavy": r2.model_dump(),
                  "hit": again.from_cache, "arch": lean.arch}))
''')
    assert out["magic"] == "7f454c46" and out["name"] == "scale" and out["arch"] == "gfx942"
    assert out["lean"]["spill_bytes"] == 0 and 0 < out["lean"]["registers"] <= 32
    assert out["lean"]["occupancy"] == 1.0
    assert out["heavy"]["spill_bytes"] > 0
    assert out["hit"] is True


def test_compile_error_carries_the_log() -> None:
    out = run_in_prefix(COMMON + """
from flyconfigs.errors import CompileError
try:
    backend.compile(CompileRequest('extern "C" __global__ void broken( { }', "broken"))
    print(json.dumps(None))
except CompileError as exc:
    print(json.dumps({"log": exc.log, "message": str(exc)}))
""")
    assert out and "error" in out["log"] and "gfx942" in out["message"]


EXHAUSTIVE = os.environ.get("FLYCONFIGS_EXHAUSTIVE") == "1"
SAMPLE = 5
FUSED_SAMPLE = 3
"""The residual kernel is the same source under one more define: a smaller sample a key."""


def _compile_space(sample: int | None, residual: bool = False) -> list[dict[str, object]]:
    return run_in_prefix(COMMON + f"""
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.registry.sources.device import DeviceQuery
dev = DeviceQuery("amd", "gfx942", "AMD Instinct MI300X", 304, ("sramecc+", "xnack-"))
keys = [{{"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}}, {{"M": 3, "N": 7, "dtype": "fp16", "weight_dtype": "fp32"}},
        {{"M": 64, "N": 1000, "dtype": "fp32", "weight_dtype": "fp32"}}, {{"M": 1, "N": 16384, "dtype": "bf16", "weight_dtype": "fp32"}}]
sample = {sample!r}
report = []
for key in keys:
    space = SPEC.space(key, dev)
    default = SPEC.default_config(key, dev)
    if sample is not None and len(space) > sample:
        # Deterministic sample spread over the whole space, the default always in it.
        step = len(space) / sample
        chosen = [space[int(i * step)] for i in range(sample)]
        space = chosen if default in chosen else [default, *chosen]
    requests = [SPEC.request(c, key, 64, {residual!r}) for c in space]
    results = backend.compile_many(requests, workers=2)
    errors = [str(r)[:500] for r in results if isinstance(r, Exception)]
    index = space.index(default)
    res = backend.resources(results[index], default["threads"] * default["rows_per_block"])
    report.append({{"key": key, "configs": len(space), "errors": errors, "default_spills": res.spill_bytes}})
print(json.dumps(report))
""", timeout=1200)


def _check(report: list[dict[str, object]]) -> None:
    for entry in report:
        assert entry["errors"] == [], (entry["key"], entry["errors"][:1])  # type: ignore[index]
        assert entry["default_spills"] == 0, entry
        assert entry["configs"] >= 1  # type: ignore[operator]


def test_a_sample_of_every_keys_rmsnorm_space_compiles_for_gfx942_and_the_default_does_not_spill() -> None:
    _check(_compile_space(SAMPLE))


@pytest.mark.slow
def test_the_fused_residual_add_kernel_compiles_for_gfx942_from_the_same_source() -> None:
    """Fused add + RMSNorm's ``source`` implementation is this source with ``FC_RESIDUAL``:
    a sample of every key's space compiles for gfx942 and its default does not spill."""
    _check(_compile_space(FUSED_SAMPLE, residual=True))


@pytest.mark.exhaustive
@pytest.mark.skipif(not EXHAUSTIVE, reason="exhaustive compiles run with FLYCONFIGS_EXHAUSTIVE=1 (about 200 s)")
def test_every_rmsnorm_config_compiles_for_gfx942_and_the_default_does_not_spill() -> None:
    _check(_compile_space(None))


def test_the_tuners_toolchain_compiles_what_it_queued_ahead_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Threads stand in for the spawned processes, which do not inherit the prefix's loader.
    out = run_in_prefix(f"""
import json, os
os.environ["FLYCONFIGS_CACHE_DIR"] = {str(tmp_path / "cache")!r}
from concurrent.futures import ThreadPoolExecutor
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.schema.models import Device
from flyconfigs.tuner.key import candidate_configs
from flyconfigs.tuner.toolchain import GPUToolchain
device = Device(vendor="amd", arch="gfx942", product="AMD Instinct MI300X", compute_units=304, wave_size=64)
first = SPEC.check_key({{"M": 16, "N": 1024, "dtype": "bf16", "weight_dtype": "bf16"}})
second = {{**first, "M": 4096}}  # M is not compiled in: the same row length shares its variants
configs = candidate_configs(SPEC, first, device, 3)
toolchain = GPUToolchain("hip", 2, executor_factory=lambda: ThreadPoolExecutor(2))
queued = [toolchain.compile_ahead(SPEC, first, configs, device), toolchain.compile_ahead(SPEC, second, configs, device)]
errors = toolchain.compile_all(SPEC, first, configs, device)
after_first = [toolchain.compiled, toolchain.cached]
toolchain.compile_all(SPEC, second, configs, device)
report = {{"queued": queued, "errors": errors, "after_first": after_first, "after_second": [toolchain.compiled, toolchain.cached],
          "seconds": toolchain.compile_seconds, "cubins": len(list((os.environ["FLYCONFIGS_CACHE_DIR"] and __import__("pathlib").Path(os.environ["FLYCONFIGS_CACHE_DIR"])).rglob("*.json")))}}
toolchain.close()
print(json.dumps(report))
""")
    assert out["queued"] == [3, 0], "the second key's variants were already queued by the first"
    assert out["errors"] == [None, None, None]
    assert out["after_first"] == [3, 0], "each queued variant compiled once, not again for compile_all"
    assert out["after_second"] == [3, 3], "the second key took the same compiles, counted as cache hits"
    assert out["seconds"] > 0
