"""The vllm_fused_moe declaration: its key as vLLM's files name it, the rules a served
config must meet, and an empty default (nothing imported: vLLM chooses)."""

from __future__ import annotations

import pytest

from flyconfigs.errors import InvalidKeyError
from flyconfigs.kernels.vllm_fused_moe import SPEC
from flyconfigs.registry import kernel_declaration

KEY = {"E": 128, "N": 384, "dtype": "fp8_w8a8", "block_shape": [128, 128], "M": 64}
CONFIG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 64, "num_warps": 4,
          "num_stages": 5}


def test_it_is_declared_through_the_entry_point_group() -> None:
    assert kernel_declaration("vllm_fused_moe") is SPEC
    assert [a.name for a in SPEC.key_axes if a.ordinal] == ["M"]


def test_a_key_takes_null_dtype_and_block_shape_but_not_a_malformed_block_shape() -> None:
    assert SPEC.check_key({**KEY, "dtype": None, "block_shape": None})["dtype"] is None
    for shape in ([128], [128, 0], [128, 128.0], [128, True]):
        with pytest.raises(InvalidKeyError, match="block_shape"):
            SPEC.check_key({**KEY, "block_shape": shape})


@pytest.mark.parametrize("change, why", [
    ({"BLOCK_SIZE_K": 256}, "BLOCK_SIZE_K=256 does not divide the quantization block's 128"),
    ({"BLOCK_SIZE_N": 96}, "BLOCK_SIZE_N=96 is not a power of two"),
    ({"num_warps": 4.0}, "num_warps=4.0 is not a non-negative int"),
    ({"GROUP_SIZE_M": 0}, "GROUP_SIZE_M must be at least 1"),
    ({"USE_TMA": 1}, "unknown USE_TMA"),
])
def test_a_config_the_kernel_cannot_run_is_refused_with_the_reason(change: dict[str, object], why: str) -> None:
    assert SPEC.check_config(CONFIG, KEY, None) is None
    assert why in (SPEC.check_config({**CONFIG, **change}, KEY, None) or "")


def test_the_rocm_launch_options_are_optional_and_a_missing_required_tunable_is_named() -> None:
    assert SPEC.check_config({**CONFIG, "waves_per_eu": 0, "matrix_instr_nonkdim": 16, "kpack": 2}, KEY, None) is None
    assert "missing num_stages" in (SPEC.check_config({k: v for k, v in CONFIG.items() if k != "num_stages"}, KEY, None)
                                    or "")
    assert SPEC.check_config({**CONFIG, "BLOCK_SIZE_K": 256}, {**KEY, "block_shape": None}, None) is None


def test_the_default_is_empty_so_that_vllm_keeps_its_own_choice() -> None:
    assert SPEC.default_config(SPEC.check_key(KEY), None) == {}
