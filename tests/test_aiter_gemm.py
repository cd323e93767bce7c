"""The aiter GEMM declarations: the key and config columns of each family's CSV, typed."""

from __future__ import annotations

from flyconfigs.kernels.aiter_gemm import A8W8_BPRESHUFFLE, FAMILIES
from flyconfigs.registry import kernel_declaration

KEY = {"M": 64, "N": 1536, "K": 5120, "q_dtype_w": "torch.int8"}
CONFIG = {"libtype": "asm", "kernelId": 0, "splitK": 1, "kernelName": "_ZN5aiter41I8gemm_bf16_perTokenI8_BpreShuffle_16x128E"}


def test_each_family_is_declared_through_the_entry_point_group() -> None:
    for spec in FAMILIES.values():
        assert kernel_declaration(spec.name) == spec
    assert sorted(spec.name for spec in FAMILIES.values()) == ["aiter_gemm_a8w8_blockscale",
                                                                "aiter_gemm_a8w8_bpreshuffle"]
    assert [(a.name, a.ordinal) for a in A8W8_BPRESHUFFLE.key_axes] == [("M", True), ("N", False), ("K", False),
                                                                        ("q_dtype_w", False)]


def test_a_config_is_exactly_the_config_columns_each_typed() -> None:
    spec = A8W8_BPRESHUFFLE
    assert spec.check_config(CONFIG, KEY, None) is None
    assert "expected libtype, kernelId, splitK, kernelName" in (spec.check_config({**CONFIG, "us": 7.3}, KEY, None) or "")
    assert spec.check_config({**CONFIG, "kernelId": "0"}, KEY, None) == "kernelId='0' is not int"
    assert spec.check_config({**CONFIG, "splitK": -1}, KEY, None) == "splitK=-1 is negative"
    assert spec.check_config({**CONFIG, "kernelName": ""}, KEY, None) == "kernelName is empty"
    assert spec.default_config(KEY, None) == {}
