"""RMSNorm's ``cluster`` tunable: a row shared by a thread-block cluster exists only where
the device runs clusters (NVIDIA sm90 and later), configs published before the tunable
keep their meaning, and the launch geometry covers every slice of every row."""

from __future__ import annotations

import pytest

from flyconfigs.kernels.rmsnorm import SPEC, TUNABLES, max_cluster_of
from flyconfigs.kernels.rmsnorm import default as rmsnorm_default
from flyconfigs.registry.checks.kernel_schema import config_schema
from flyconfigs.registry.declarations import check_config
from flyconfigs.registry.sources.device import DeviceQuery

H200 = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())
A100 = DeviceQuery("nvidia", "sm80", "NVIDIA A100", 108, ())
MI300X = DeviceQuery("amd", "gfx942", "AMD Instinct MI300X", 304, ())
FEW_LONG_ROWS = {"M": 16, "N": 16384, "dtype": "bf16", "weight_dtype": "bf16"}
CLUSTERED = {"threads": 256, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0, "cluster": 8}


def test_only_sm90_and_later_run_clusters() -> None:
    assert [max_cluster_of(d) for d in (H200, DeviceQuery("nvidia", "sm100a"), A100, MI300X, None)] == [8, 8, 1, 1, 1]
    assert SPEC.check_config(CLUSTERED, FEW_LONG_ROWS, H200) is None
    for device in (A100, MI300X, None):
        why = SPEC.check_config(CLUSTERED, FEW_LONG_ROWS, device)
        assert why is not None and "cluster of 8" in why, device
        assert all(c["cluster"] == 1 for c in SPEC.space(FEW_LONG_ROWS, device))
    assert {c["cluster"] for c in SPEC.space(FEW_LONG_ROWS, H200)} == {1, 2, 4, 8}


def test_a_config_from_before_clusters_means_cluster_1() -> None:
    old = {k: v for k, v in CLUSTERED.items() if k != "cluster"}
    assert SPEC.check_config(old, FEW_LONG_ROWS, MI300X) is None
    assert SPEC.defines(old, FEW_LONG_ROWS, 64) == SPEC.defines({**old, "cluster": 1}, FEW_LONG_ROWS, 64)
    assert SPEC.complete_config(old) == {**old, "cluster": 1, "cache_hints": "none"}
    schema = config_schema(SPEC)
    assert schema is not None and "cluster" not in schema["required"]
    assert schema["properties"]["cluster"]["default"] == 1
    why = check_config(SPEC, {**old, "cluster": 3}, FEW_LONG_ROWS, H200)
    assert why is not None and "cluster=3" in why


def test_every_block_of_a_cluster_has_a_slice() -> None:
    # 64 bf16 elements in 16-byte vectors are 8 vectors: 8 blocks of one, never 16.
    short = {"M": 1, "N": 64, "dtype": "bf16", "weight_dtype": "bf16"}
    config = {**CLUSTERED, "threads": 32}
    assert SPEC.valid(config, short, 32, 8) is None
    assert SPEC.valid({**config, "vector_bytes": 0}, short, 32, 8) is None
    tiny = {**short, "N": 7}
    why = SPEC.valid({**config, "vector_bytes": 0}, tiny, 32, 8)
    assert why is not None and "without a slice" in why


@pytest.mark.parametrize("m", [1, 5, 1000])
def test_the_grid_has_one_block_per_slice_of_every_row(m: int) -> None:
    grid, block, shared = SPEC.grid(CLUSTERED, m)
    assert grid == (m * 8, 1, 1) and block == (256, 1, 1) and shared == 0
    two_rows = {**CLUSTERED, "rows_per_block": 2, "cluster": 2}
    assert SPEC.grid(two_rows, m)[0] == (-(-m // 2) * 2, 1, 1)


def test_the_learned_default_reads_a_clustered_shape_per_block_slice() -> None:
    shape = rmsnorm_default.shape_of(CLUSTERED, 16384, "bf16")
    # 2048 vectors over 8 blocks are 256 per block: 256 threads hold one each.
    assert shape == (0, 1, 16, "reg", 0, 8, "none")
    assert rmsnorm_default.config_of(shape, 16384, "bf16") == {**CLUSTERED, "cache_hints": "none"}
    old = rmsnorm_default.decode({"compute_units": 132, "cells": [
        {"dtype": "bf16", "weight_dtype": "bf16", "M": 1, "N": 1024, "shapes": [[0, 1, 16, "reg", 0, 0.0]]}]})
    assert list(old.cells[("bf16", "bf16", 1, 1024)]) == [(0, 1, 16, "reg", 0, 1, "none")]


def test_clusters_are_offered_only_to_few_or_long_rows() -> None:
    many_short = {"M": 65536, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
    few_short = {"M": 1, "N": 1024, "dtype": "bf16", "weight_dtype": "bf16"}
    many_long = {"M": 65536, "N": 16384, "dtype": "bf16", "weight_dtype": "bf16"}
    assert {c["cluster"] for c in SPEC.space(many_short, H200)} == {1}
    assert {c["cluster"] for c in SPEC.space(few_short, H200)} == {1}
    assert {c["cluster"] for c in SPEC.space(many_long, H200)} == {1, 2, 4, 8}
    for config in SPEC.space(many_long, H200):
        if config["cluster"] > 1:
            assert config["row_storage"] == "reg" and config["rows_per_block"] == 1


def test_every_cluster_of_the_space_has_a_lane_a_row_for_each_of_its_blocks() -> None:
    """Lane r of a row pushes its block's partial sum into block r of the cluster
    (rmsnorm.cu asserts it at compile time), so no config may have fewer threads a row
    than blocks in its cluster."""
    assert max(map(int, TUNABLES["cluster"])) <= min(map(int, TUNABLES["threads"]))
