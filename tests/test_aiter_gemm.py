"""The aiter families, declared as data: every tuned CSV of the corpus is read for exactly
one family, as aiter's get_config_file globs; each family's key, config and measurement
columns; the padding aiter's lookups apply (getPaddedM, get_padded_M) and the nearest-key
rule built on it."""

from __future__ import annotations

import pytest

from aiter_corpus import read_rows, tuned_files
from flyconfigs.errors import InvalidKeyError
from flyconfigs.kernels.aiter_family import MEASURED, batched_padded_m, moe_padded_token, padded_m
from flyconfigs.kernels.aiter_gemm import (
    A8W8_BLOCKSCALE,
    BATCHED_A8W8,
    BATCHED_BF16,
    BF16,
    FAMILIES,
    FMOE,
    GROUPED_FMOE,
    family_of,
)
from flyconfigs.registry import kernel_declaration


def test_each_family_is_declared_through_the_entry_point_group() -> None:
    for family in FAMILIES.values():
        assert kernel_declaration(family.name) == family
    assert len(FAMILIES) == 16  # fifteen declared in Python, one from data (kernels/aiter_families/)


def test_every_tuned_csv_is_read_for_one_family_whose_columns_it_has() -> None:
    seen = set()
    for path in tuned_files():
        family = family_of(path.name)
        assert family is not None, path
        header, _ = read_rows(path)
        assert family.layout_problem(header) is None, (path, family.layout_problem(header))
        seen.add(family.name)
    assert seen == set(FAMILIES) - {"aiter_flydsl_gemm_a8w8_bpreshuffle"}  # its file is in corpora/aiter-acf9add4
    assert family_of("a8w8_blockscale_bpreshuffle_tuned_gemm_dsv3.csv").name == "aiter_gemm_a8w8_blockscale_bpreshuffle"
    assert family_of("a8w8_blockscale_untuned_gemm.csv") is None and family_of("README.md") is None


def test_padded_m_is_aiters_get_padded_m() -> None:
    # gemm_common.cu: level 0 rounds up to 16 (<= 256), 32 (<= 1024), 64 (<= 4096), else 128.
    assert [padded_m(m, 4096, 4096, 0) for m in (1, 16, 17, 256, 257, 1024, 1025, 4097)] == [
        16, 16, 32, 256, 288, 1024, 1088, 4224]
    # level 1: the next power of two, or 8192 past 8192 rows when N > 4096.
    assert [padded_m(m, 4096, 1, 1) for m in (1, 3, 17, 9000)] == [1, 4, 32, 16384]
    assert padded_m(9000, 4097, 1, 1) == 8192
    assert [moe_padded_token(t) for t in (1, 5, 32767, 32768, 100000, 131072, 500000)] == [
        1, 8, 32768, 32768, 32768, 131072, 131072]


def test_the_gemm_rule_is_exact_then_fine_then_coarse_else_none() -> None:
    asked = {"cu_num": 304, "M": 17, "N": 1536, "K": 7168}
    assert A8W8_BLOCKSCALE.key_distance(asked, {**asked}) == (0.0,)
    assert A8W8_BLOCKSCALE.key_distance(asked, {**asked, "M": 32}) == (1.0,)  # fine and coarse agree: fine first
    asked = {**asked, "M": 33}
    assert A8W8_BLOCKSCALE.key_distance(asked, {**asked, "M": 48}) == (1.0,)
    assert A8W8_BLOCKSCALE.key_distance(asked, {**asked, "M": 64}) == (2.0,)
    for other in (32, 16, 128, 34):  # never down, never past the coarse padding, never an unpadded neighbour
        assert A8W8_BLOCKSCALE.key_distance(asked, {**asked, "M": other}) is None


def test_the_batched_gemms_pad_m_once_as_their_cpp_dispatch_does() -> None:
    # batched_gemm_a8w8.cu / batched_gemm_bf16.cu at the corpus's revision: 16 for 2..16, the next
    # power of two up to 16384, 20480 up to 20480, else M.
    assert [batched_padded_m(m) for m in (1, 2, 16, 17, 33, 16384, 16385, 20480, 20481, 30000)] == [
        1, 16, 16, 32, 64, 16384, 20480, 20480, 20481, 30000]
    for family in (BATCHED_A8W8, BATCHED_BF16):
        asked = {"cu_num": 304, "B": 16, "M": 17, "N": 8192, "K": 1024}
        assert family.key_distance(asked, asked) == (0.0,)
        assert family.key_distance(asked, {**asked, "M": 32}) == (1.0,)
        for other in (16, 24, 64, 18):  # one padded M only: never down, never a further power of two
            assert family.key_distance(asked, {**asked, "M": other}) is None
        assert family.key_distance({**asked, "M": 1}, {**asked, "M": 16}) is None  # M=1 is looked up as 1 only
        assert family.key_distance({**asked, "M": 17000}, {**asked, "M": 20480}) == (1.0,)


def test_the_moe_key_is_padded_as_aiter_pads_it_and_falls_back_one_tier() -> None:
    key = {"cu_num": 256, "token": 5, "model_dim": 7168, "inter_dim": 256, "expert": 256, "topk": 8,
           "act_type": "ActivationType.Silu", "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fn",
           "q_dtype_w": "torch.float8_e4m3fn", "q_type": "QuantType.per_1x128", "use_g1u1": 1, "doweight_stage1": 0}
    checked = FMOE.check_key(key)
    assert checked["token"] == 8 and checked["flydsl_fallback"] is False
    big = FMOE.check_key({**key, "token": 200000})
    assert big["token"] == 131072
    assert FMOE.key_distance(big, {**big, "token": 32768}) == (1.0, 0.0)
    assert FMOE.key_distance(FMOE.check_key({**key, "token": 40000}), {**big, "token": 16384}) is None
    assert GROUPED_FMOE.key_distance(big, {**big, "token": 32768}) is None  # no tier fallback there
    with pytest.raises(InvalidKeyError):
        FMOE.check_key({**key, "use_g1u1": "1"})


def test_a_config_names_only_config_columns_and_the_default_is_aiters_own_path() -> None:
    config = {"libtype": "hipblaslt", "solidx": 7, "splitK": 0, "kernelName": "Cijk_Alik"}
    assert BF16.check_config(config, {}, None) is None
    assert "us" in (BF16.check_config({**config, "us": 3.2}, {}, None) or "")
    assert BF16.check_config({**config, "solidx": [1]}, {}, None) == "solidx=[1] is not a scalar"
    assert BF16.default_config({}, None) == {}
    assert not any(set(f.config) & MEASURED or set(f.key) & MEASURED for f in FAMILIES.values())
