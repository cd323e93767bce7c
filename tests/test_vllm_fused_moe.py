"""The vllm_fused_moe and vllm_flydsl_moe declarations: their keys as vLLM's files name
them, vLLM's nearest batch size, what vLLM launches (the BLOCK_SIZE_K clamp, the tile
snap), the bounds of what a launch can be, and an empty default (vLLM chooses)."""

from __future__ import annotations

import pytest

from flyconfigs.errors import InvalidKeyError
from flyconfigs.kernels import vllm_flydsl_moe
from flyconfigs.kernels.vllm_fused_moe import SPEC, launch_config
from flyconfigs.registry import kernel_declaration
from flyconfigs.registry.search.ties import has_own_tie_rank
from flyconfigs.registry.sources.device import DeviceQuery

KEY = {"E": 128, "N": 384, "dtype": "fp8_w8a8", "block_n": 128, "block_k": 128, "down": False, "M": 64}
CONFIG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 64, "num_warps": 4,
          "num_stages": 5}
MI300X = DeviceQuery("amd", "gfx942")
H100 = DeviceQuery("nvidia", "sm90")


def test_they_are_declared_through_the_entry_point_group() -> None:
    assert kernel_declaration("vllm_fused_moe") is SPEC
    assert kernel_declaration("vllm_flydsl_moe") is vllm_flydsl_moe.SPEC
    assert [a.name for a in SPEC.key_axes if a.ordinal] == ["M"]
    assert SPEC.version == 2


def test_a_key_takes_a_null_dtype_and_block_but_not_half_a_block_or_a_missing_down() -> None:
    assert SPEC.check_key({**KEY, "dtype": None, "block_n": None, "block_k": None})["dtype"] is None
    for block_n, block_k in ((128, None), (None, 128), (0, 128), (128.0, 128), (True, 128)):
        with pytest.raises(InvalidKeyError, match="block_"):
            SPEC.check_key({**KEY, "block_n": block_n, "block_k": block_k})
    with pytest.raises(InvalidKeyError, match="missing down"):
        SPEC.check_key({k: v for k, v in KEY.items() if k != "down"})
    with pytest.raises(InvalidKeyError, match="down"):
        SPEC.check_key({**KEY, "down": 1})


@pytest.mark.parametrize("change, why", [
    ({"BLOCK_SIZE_N": 96}, "BLOCK_SIZE_N=96 is not a power of two"),
    ({"num_warps": 4.0}, "num_warps=4.0 is not a non-negative int"),
    ({"GROUP_SIZE_M": 0}, "GROUP_SIZE_M=0: must be at least 1"),
    ({"USE_TMA": 1}, "USE_TMA=1 is not true or false"),
    ({"grf_mode": 256}, "grf_mode=256 is not one of"),
    ({"kpack": 3}, "kpack=3: the ROCm backend takes 1, 2"),
    ({"num_ctas": 3}, "num_ctas=3 is not a power of two"),
    # What Triton cannot launch: 1024 warps (32,768 threads a program), a 2**62-row tile,
    # a K split in no part.
    ({"num_warps": 1024}, "num_warps=1024 of 32 threads is more than 1024 threads a program"),
    ({"BLOCK_SIZE_M": 2**62}, "BLOCK_SIZE_M x BLOCK_SIZE_K tile of 590295810358705651712 elements is more than"),
    ({"SPLIT_K": 0}, "SPLIT_K=0: must be at least 1"),
])
def test_a_config_the_kernel_cannot_launch_is_refused_with_the_reason(change: dict[str, object], why: str) -> None:
    assert SPEC.check_config(CONFIG, KEY, None) is None
    assert why in (SPEC.check_config({**CONFIG, **change}, KEY, None) or "")


def test_the_largest_launches_pass_and_one_more_does_not() -> None:
    assert SPEC.check_config({**CONFIG, "num_warps": 32}, KEY, H100) is None
    assert SPEC.check_config({**CONFIG, "num_warps": 16}, KEY, MI300X) is None
    assert "32 of 64 threads" in (SPEC.check_config({**CONFIG, "num_warps": 32}, KEY, MI300X) or "")
    square = {**CONFIG, "BLOCK_SIZE_M": 1024, "BLOCK_SIZE_N": 1024, "BLOCK_SIZE_K": 128}
    assert SPEC.check_config(square, KEY, H100) is None  # 2**20 elements: Triton's largest tensor
    assert "BLOCK_SIZE_M x BLOCK_SIZE_N tile of 2097152" in (SPEC.check_config(
        {**square, "BLOCK_SIZE_N": 2048}, KEY, H100) or "")
    assert SPEC.check_config({**CONFIG, "SPLIT_K": 1}, KEY, None) is None


def test_block_size_k_is_clamped_to_the_quantization_block_at_launch_as_vllm_does() -> None:
    # vLLM 0.34 ships BLOCK_SIZE_K 256 for 128-wide blocks and launches 128.
    wide = {**CONFIG, "BLOCK_SIZE_K": 256, "USE_TMA": True, "SPLIT_K": 4}
    assert SPEC.check_config(wide, KEY, H100) is None
    assert launch_config(wide, KEY) == {**CONFIG, "BLOCK_SIZE_K": 128, "SPLIT_K": 1}
    assert launch_config(wide, {**KEY, "block_n": 64, "block_k": 128})["BLOCK_SIZE_K"] == 64
    assert launch_config(wide, {**KEY, "block_n": None, "block_k": None})["BLOCK_SIZE_K"] == 256
    # A launched BLOCK_SIZE_K that does not divide the block's k reads two scales a step.
    assert "BLOCK_SIZE_K=64 (at launch) does not divide the quantization block's 96" in (
        SPEC.check_config(wide, {**KEY, "block_n": 64, "block_k": 96}, None) or "")


def test_a_down_projection_entry_may_only_turn_the_tma_path_off() -> None:
    down = {**KEY, "down": True}
    assert SPEC.check_config({"USE_TMA": False}, down, H100) is None
    assert SPEC.check_config({**CONFIG, "USE_TMA": True}, down, H100) is None
    assert "missing BLOCK_SIZE_M" in (SPEC.check_config({"USE_TMA": False}, KEY, H100) or "")
    assert "missing BLOCK_SIZE_M" in (SPEC.check_config({"USE_TMA": True}, down, H100) or "")


def test_the_nearest_batch_size_is_vllms_and_a_tie_goes_by_the_files_order() -> None:
    # key_distance alone sends a tie to the smaller (the order of an ascending file); two
    # rows of one file tie by their order (tests/test_vllm_ties.py).
    assert has_own_tie_rank(SPEC) and has_own_tie_rank(vllm_flydsl_moe.SPEC)
    tuned = [1, 8, 16, 128, 256]

    def served(m: int) -> int:
        return min(tuned, key=lambda t: SPEC.key_distance({**KEY, "M": m}, {**KEY, "M": t}) or ())

    assert [served(m) for m in (1, 4, 5, 12, 13, 192, 193, 191, 10**6)] == [1, 1, 8, 8, 16, 128, 256, 128, 256]
    assert SPEC.key_distance({**KEY, "M": 12}, {**KEY, "M": 16}) == (4.0, 16.0)


def test_the_flydsl_kernels_tiles_are_snapped_at_launch_and_any_positive_tile_is_valid() -> None:
    spec = vllm_flydsl_moe.SPEC
    key = {"E": 384, "N": 256, "dtype": "int4_w4a16", "M": 16}
    old = {"tile_m": 16, "tile_n": 64, "tile_k": 512, "tile_n2": 256, "tile_k2": 64}
    assert spec.check_config(old, key, MI300X) is None
    assert vllm_flydsl_moe.launch_config(old) == {"tile_m": 16, "tile_n": 64, "tile_k": 256, "tile_n2": 128,
                                                  "tile_k2": 128}
    assert "tile_k=0 is not a positive int" in (spec.check_config({**old, "tile_k": 0}, key, None) or "")
    assert "unknown BLOCK_SIZE_M" in (spec.check_config({**old, "BLOCK_SIZE_M": 16}, key, None) or "")
    with pytest.raises(InvalidKeyError, match="dtype"):
        spec.check_key({**key, "dtype": "fp8_w8a8"})


def test_the_defaults_are_empty_so_that_vllm_keeps_its_own_choice() -> None:
    assert SPEC.default_config(SPEC.check_key(KEY), None) == {}
    assert vllm_flydsl_moe.SPEC.default_config({}, None) == {}
