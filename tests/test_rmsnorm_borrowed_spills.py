"""RMSNorm's occupancy bound against its row held in registers, on real NVRTC (sm90, no
GPU): ``__launch_bounds__(block, occupancy)`` caps a thread's registers, and a config
whose row takes more than half of that cap spills.  The rule that refuses it keeps every
committed winner valid, leaves only configs that compile without spilling in the space,
and so stops 5000×18432 being served 4096×16384's 512 threads at occupancy 2 (40 bytes
of spills at 18432)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from flyconfigs.gpu.backend import Backend
from flyconfigs.gpu.cache import CompileCache
from flyconfigs.gpu.cubin import resources_from_cubin
from flyconfigs.gpu.cuda import CudaBinding
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.registry import DeviceQuery, Resolver
from nvrtc_helpers import needs_nvrtc

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
H100 = DeviceQuery("nvidia", "sm90", "NVIDIA H100 80GB HBM3", 132, ())
MI300X = DeviceQuery("amd", "gfx942", "AMD Instinct MI300X", 304, ("sramecc+", "xnack-"))
BORROWED = {"threads": 512, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg", "occupancy": 2,
            "cluster": 1, "cache_hints": "none"}


def _key(m: int, n: int, dtype: str = "bf16") -> dict[str, object]:
    return {"M": m, "N": n, "dtype": dtype, "weight_dtype": dtype}


@functools.cache
def _backend(root: str) -> Backend:
    return Backend(CudaBinding(), arch="sm90", cache=CompileCache(Path(root) / "cache"))


def _spills(backend: Backend, config: dict[str, object], key: dict[str, object]) -> int:
    compiled = backend.compile(SPEC.request(config, key, 32))
    block = int(config["threads"]) * int(config["rows_per_block"])  # type: ignore[call-overload]
    return resources_from_cubin(compiled.code, compiled.lowered_name, "sm90", block).spill_bytes


def test_the_rule_refuses_a_row_past_half_the_register_cap_on_nvidia_only() -> None:
    assert SPEC.check_config(BORROWED, _key(4096, 16384), H100) is None, "32 values in a cap of 64"
    why = SPEC.check_config(BORROWED, _key(5000, 18432), H100)
    assert why is not None and "40 values" in why and "64 registers" in why and "spills" in why
    assert SPEC.check_config({**BORROWED, "occupancy": 0}, _key(5000, 18432), H100) is None
    assert SPEC.check_config({**BORROWED, "row_storage": "reread"}, _key(5000, 18432), H100) is None
    assert SPEC.check_config(BORROWED, _key(5000, 18432), MI300X) is None, "waves per EU there, another budget"


def test_every_committed_winner_still_passes_it() -> None:
    for target in ("sm90", "sm80", "sm100"):
        resolver = Resolver(paths=[str(ARTIFACTS / target)], detector=None)
        for entry in resolver.all_entries():
            if entry.kernel != "rmsnorm":
                continue
            artifact = entry.load(resolver.problems)
            assert artifact is not None, entry.path
            device = DeviceQuery.of(entry.device)
            assert SPEC.check_config(artifact.winner.config, entry.key, device) is None, (entry.path, entry.key)


@pytest.mark.nvrtc
@needs_nvrtc
def test_the_rule_is_where_nvrtc_starts_spilling(tmp_path: Path) -> None:
    backend = _backend(str(tmp_path))
    assert _spills(backend, BORROWED, _key(4096, 16384)) == 0
    assert _spills(backend, BORROWED, _key(5000, 18432)) > 0
    cap4 = {**BORROWED, "threads": 256, "occupancy": 4}  # a cap of 64 again
    assert _spills(backend, cap4, _key(1000, 8192)) == 0 and SPEC.check_config(cap4, _key(1000, 8192), H100) is None
    assert _spills(backend, cap4, _key(1000, 12288)) > 0 and SPEC.check_config(cap4, _key(1000, 12288), H100)


@pytest.mark.nvrtc
@needs_nvrtc
@pytest.mark.parametrize(("m", "n", "dtype"), [(5000, 18432, "bf16"), (640, 12800, "bf16"), (4096, 8192, "fp32")])
def test_no_config_of_the_space_with_an_occupancy_bound_spills(tmp_path: Path, m: int, n: int, dtype: str) -> None:
    backend = _backend(str(tmp_path))
    key = _key(m, n, dtype)
    bounded = [c for c in SPEC.space(key, H100) if c["occupancy"] and c["row_storage"] == "reg"]
    assert bounded
    for config in bounded:
        assert _spills(backend, config, key) == 0, config


@pytest.mark.nvrtc
@needs_nvrtc
def test_the_worst_long_row_is_served_a_config_that_does_not_spill(tmp_path: Path) -> None:
    resolver = Resolver(paths=[str(ARTIFACTS / "sm90")], detector=None)
    key = _key(5000, 18432)
    served = resolver.resolve(SPEC, key, H100)
    assert dict(served.config) != BORROWED
    assert _spills(_backend(str(tmp_path)), dict(served.config), key) == 0
