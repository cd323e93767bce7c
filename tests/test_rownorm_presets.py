"""The key grids both row-norm families name: ``models`` (the hidden sizes of the open models
people serve, their tensor-parallel shards, row counts that are not powers of two) and
``unseen`` (keys no other grid names, on which served configs are scored against tuning)."""

from __future__ import annotations

import pytest

from flyconfigs.kernels.fused_add_rmsnorm import SPEC as FUSED
from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.kernels.rmsnorm import SPEC as RMSNORM
from flyconfigs.tuner.grid import parse_grids

FAMILIES = [RMSNORM, FUSED]
SERVED = {
    # model family: the hidden sizes docs/benchmarks.md and kernels/rownorm.py cite a source for
    "Llama 3.x": {2048, 3072, 4096, 8192, 16384},
    "Qwen2.5/Qwen3": {896, 1024, 1536, 2048, 2560, 3584, 4096, 5120, 8192},
    "Mistral": {4096, 5120, 6144, 12288},
    "Gemma 2/3": {1152, 2304, 2560, 3584, 3840, 4608, 5376},
    "DeepSeek V2/V3": {5120, 7168, 512, 1536},
    "GPT-OSS": {2880},
    "Phi-3/4": {3072, 5120},
}
SHARDED = (2880, 5376, 7168, 12288)


def _axis(decl: TunableKernel, preset: str, axis: str) -> set[int]:
    return {int(k[axis]) for k in parse_grids([preset], decl)}


@pytest.mark.parametrize("decl", FAMILIES, ids=lambda d: d.name)
def test_the_models_grid_holds_every_served_size_and_its_shards_and_no_other(decl: TunableKernel) -> None:
    sizes = set().union(*SERVED.values())
    shards = {n // tp for n in SHARDED for tp in (2, 4, 8) if n % tp == 0 and n // tp >= 256}
    assert _axis(decl, "models", "N") == sizes | shards
    assert {1440, 720, 360, 2688, 1344, 672, 1792} <= shards - sizes


@pytest.mark.parametrize("decl", FAMILIES, ids=lambda d: d.name)
def test_the_models_grid_is_small_enough_to_benchmark_and_its_rows_are_not_powers_of_two(decl: TunableKernel) -> None:
    keys = parse_grids(["models"], decl)
    assert 80 <= len(keys) <= 110
    assert all(m == 1 or m & (m - 1) for m in _axis(decl, "models", "M"))
    assert {(k["dtype"], k["weight_dtype"]) for k in keys} == {("bf16", "bf16"), ("fp16", "fp16"), ("bf16", "fp32")}
    for key in keys:
        decl.check_key(key)  # every key is one the family serves
    # Several row counts per served size: decode (M <= 7), mid and prefill (M >= 3000).
    for n in set().union(*SERVED.values()) - {512}:
        ms = {int(k["M"]) for k in keys if k["N"] == n}
        assert min(ms) <= 7 and max(ms) >= 3000, (n, ms)


def test_both_families_name_the_same_models_and_unseen_grids() -> None:
    for preset in ("models", "unseen"):
        assert parse_grids([preset], RMSNORM) == parse_grids([preset], FUSED)


@pytest.mark.parametrize("decl", FAMILIES, ids=lambda d: d.name)
def test_unseen_shares_no_row_length_and_no_row_count_with_any_other_grid(decl: TunableKernel) -> None:
    others = [p for p in decl.presets if p != "unseen"]
    assert "models" in others and "hidden" in others
    assert len(parse_grids(["unseen"], decl)) <= 30
    for axis in ("N", "M"):
        named = set().union(*(_axis(decl, p, axis) for p in others))
        assert _axis(decl, "unseen", axis).isdisjoint(named), axis
    for key in parse_grids(["unseen"], decl):
        decl.check_key(key)
