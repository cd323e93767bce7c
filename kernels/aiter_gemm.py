"""aiter's tuned configs, declared as data: one :class:`~flyconfigs.kernels.aiter_family.AiterFamily`
per column layout of the CSVs aiter ships (``aiter/configs/*tuned*.csv``, the per-model
ones under ``aiter/configs/model_configs/`` and the FlyDSL ops' ``aiter/ops/flydsl/*_tuned.csv``),
so that they can be imported, published, served as aiter's own lookup serves them, and
exported back (flyconfigs neither runs nor tunes them).

Each declaration says which tuned files aiter reads for the family (their name stems),
the ``AITER_CONFIG_*`` variable that points aiter at one, the key columns aiter's lookup
compares (``gfx`` is the device's arch; ``cu_num`` is a key axis), every config column,
and the lookup rule on a miss.  The columns that report what aiter's tuner measured
(``us``, ``tflops``, ``bw``, ``errRatio``, …) are the table's measurements.  The lookup code
each restates is named beside it (aiter at the revision ``corpora/aiter-e4048607`` holds).
"""

from __future__ import annotations

from flyconfigs.kernels.aiter_declared import DECLARED
from flyconfigs.kernels.aiter_family import AiterFamily

__all__ = ["A8W8_BLOCKSCALE", "A8W8_BPRESHUFFLE", "FAMILIES", "family_named", "family_of"]

_GEMM = ("cu_num", "M", "N", "K")
_CK = ("libtype", "kernelId", "splitK", "kernelName")
_OPUS_ACTS = ("ActivationType.Silu", "ActivationType.Swiglu", "ActivationType.Situv2")
_MOE = ("cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype", "q_dtype_a", "q_dtype_w",
        "q_type", "use_g1u1", "doweight_stage1")

A8W8 = AiterFamily(
    "gemm_a8w8", ("a8w8_tuned_gemm",), "AITER_CONFIG_GEMM_A8W8", (*_GEMM, "q_dtype_w"),
    ("libtype", "kernelId", "splitK", "kernelName"), "gemm",
    summary="int8/fp8 GEMM, per-token scales (gemm_op_a8w8.py: get_GEMM_config_with_quant_type)")
A8W8_BPRESHUFFLE = AiterFamily(
    "gemm_a8w8_bpreshuffle", ("a8w8_bpreshuffle_tuned_gemm",), "AITER_CONFIG_GEMM_A8W8_BPRESHUFFLE",
    (*_GEMM, "q_dtype_w"), _CK, "gemm",
    summary="int8/fp8 GEMM, pre-shuffled weights (gemm_op_a8w8.py: get_GEMM_config_with_quant_type)")
A8W8_BLOCKSCALE = AiterFamily(
    "gemm_a8w8_blockscale", ("a8w8_blockscale_tuned_gemm",), "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE", _GEMM, _CK, "gemm",
    summary="fp8 GEMM, block scales (gemm_op_a8w8.py: get_CKGEMM_config)")
A8W8_BLOCKSCALE_BPRESHUFFLE = AiterFamily(
    "gemm_a8w8_blockscale_bpreshuffle", ("a8w8_blockscale_bpreshuffle_tuned_gemm",),
    "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE", _GEMM, _CK, "gemm",
    summary="fp8 GEMM, block scales, pre-shuffled weights (gemm_op_a8w8.py: get_CKGEMM_config)")
A4W4_BLOCKSCALE = AiterFamily(
    "gemm_a4w4_blockscale", ("a4w4_blockscale_tuned_gemm",), "AITER_CONFIG_GEMM_A4W4", _GEMM,
    ("kernelId", "splitK", "kernelName"), "gemm",
    summary="fp4 GEMM, block scales (gemm_op_a4w4.py: get_GEMM_config)")
BF16 = AiterFamily(
    "gemm_bf16", ("bf16_tuned_gemm",), "AITER_CONFIG_GEMM_BF16",
    (*_GEMM, "bias", "dtype", "outdtype", "scaleAB", "bpreshuffle"), ("libtype", "solidx", "splitK", "kernelName"), "gemm",
    summary="bf16/fp16 GEMM (tuned_gemm.py: get_GEMM_A16W16_config)")
BATCHED_A8W8 = AiterFamily(
    "batched_gemm_a8w8", ("a8w8_tuned_batched_gemm",), "AITER_CONFIG_A8W8_BATCHED_GEMM", ("cu_num", "B", "M", "N", "K"),
    ("kernelId", "splitK", "kernelName"), "batched-gemm",
    summary="batched int8 GEMM, chosen in C++ (csrc/ck_batched_gemm_a8w8/batched_gemm_a8w8.cu: "
            "batched_rowwise_dispatch: the exact M, then one padded M)")
BATCHED_BF16 = AiterFamily(
    "batched_gemm_bf16", ("bf16_tuned_batched_gemm",), "AITER_CONFIG_BF16_BATCHED_GEMM", ("cu_num", "B", "M", "N", "K"),
    ("kernelId", "splitK", "kernelName"), "batched-gemm",
    summary="batched bf16 GEMM, chosen in C++ (csrc/ck_batched_gemm_bf16/batched_gemm_bf16.cu: "
            "batched_dispatch: the exact M, then one padded M)")
BATCHED_MXSCALE = AiterFamily(
    "batched_gemm_a8w8_blockscale_mxscale", ("batched_gemm_a8w8_blockscale_mxscale_tuned",),
    "AITER_CONFIG_BATCHED_GEMM_A8W8_BLOCKSCALE_MXSCALE", ("b", "m", "n", "k"), _CK, "gemm",
    summary="batched fp8 GEMM, e8m0 block scales; keyed by gfx, no cu_num (batched_gemm_op_a8w8.py: "
            "lookup_mxscale_bmm_config)")
FMOE = AiterFamily(
    "fmoe", ("tuned_fmoe",), "AITER_CONFIG_FMOE", _MOE,
    ("block_m", "ksplit", "kernelName1", "kernelName2", "run_1stage", "xbf16", "flat", "_tag"), "moe",
    retried=("act_type",), opus_activations=_OPUS_ACTS,
    summary="two-stage fused MoE (fused_moe.py: get_2stage_cfgs; a miss retries with any act_type)")
FHMOE = AiterFamily(
    "fhmoe", ("tuned_fhmoe",), "AITER_CONFIG_FHMOE",
    (*_MOE[:6], "shared_expert_id", *_MOE[6:], "hidden_pad", "intermediate_pad", "gate_mode"),
    ("block_m", "ksplit", "kernelName1", "kernelName2"), "moe-exact", opus_activations=_OPUS_ACTS,
    summary="fused MoE with a shared expert (fused_moe.py: get_2stage_cfgs with a config file)")
GROUPED_FMOE = AiterFamily(
    "grouped_fmoe", ("tuned_grouped_fmoe",), "AITER_CONFIG_GROUPED_FMOE", _MOE,
    ("max_m", "tile_m", "tile_n", "tile_k", "tile_m2", "tile_n2", "tile_k2", "m_warp", "n_warp", "m_warp2", "n_warp2",
     "num_buffers", "num_buffer_stage2", "split_k1", "split_k2", "grouped_persistent_m", "persistent_workers",
     "wave_specialized_tdm", "tdm_as_in_prologue", "cluster_n", "waves_per_tensor_tdm", "next_stage_prefetch",
     "kernelName1", "kernelName2"), "moe-exact", on_duplicate="lowest-us", retried=("cu_num",),
    unmatched=("use_g1u1", "doweight_stage1"),
    summary="gfx1250 grouped MoE (flydsl/grouped_moe_gfx1250.py: _find_grouped_config; a miss relaxes cu_num)")
CHUNK_GDN_H_OPT = AiterFamily(
    "chunk_gdn_h_opt", ("chunk_gdn_h_opt_tuned",), "AITER_CONFIG_GDN_K5_OPT",
    ("cu_num", "H", "Hg", "V", "is_varlen", "use_h0", "store_fs", "snapshot_bf16", "state_bf16", "total_chunks",
     "max_seq_chunks"), ("dtype", "K", "BT", "T_flat", "N", "BV"), "exact",
    summary="gated delta net chunk kernel's BV (flydsl/linear_attention_prefill_kernels.py: _tuned_bv)")
FLYDSL_GDR_DECODE = AiterFamily(
    "flydsl_gdr_decode", ("gdr_decode_tuned",), None,
    ("dtype", "state_dtype", "b", "sq", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"),
    ("NUM_BLOCKS_PER_V_DIM", "NUM_WARPS", "WARP_THREADS_K"), "exact", arch_column="arch",
    summary="FlyDSL gated delta rule decode; keyed by arch, no cu_num (flydsl/linear_attention_kernels.py)")
FLYDSL_CHUNK_GDN_H = AiterFamily(
    "flydsl_chunk_gdn_h", ("chunk_gdn_h_tuned",), None,
    ("dtype", "K", "V", "BT", "H", "Hg", "T_flat", "N", "use_g", "use_gk", "use_h0", "store_fs", "save_vn", "is_varlen",
     "wu_contig"), ("BV",), "exact", arch_column="arch",
    summary="FlyDSL chunked gated delta net BV; keyed by arch (read by aiter/aot/flydsl/chunk_gdn_h.py)")

FAMILIES: dict[str, AiterFamily] = {f.name: f for f in (
    A8W8, A8W8_BPRESHUFFLE, A8W8_BLOCKSCALE, A8W8_BLOCKSCALE_BPRESHUFFLE, A4W4_BLOCKSCALE, BF16, BATCHED_A8W8,
    BATCHED_BF16, BATCHED_MXSCALE, FMOE, FHMOE, GROUPED_FMOE, CHUNK_GDN_H_OPT, FLYDSL_GDR_DECODE, FLYDSL_CHUNK_GDN_H,
    *vars(DECLARED).values())}
"""Every aiter family declared, by kernel name: those above and those declared from data
(:mod:`flyconfigs.kernels.aiter_declared`)."""


def family_of(file_name: str) -> AiterFamily | None:
    """The family aiter reads a file of this name for (``*<stem>*.csv``, not untuned; the
    longest stem wins, as ``a8w8_blockscale_bpreshuffle_tuned_gemm`` over none), or ``None``."""
    fits = [(len(stem), f) for f in FAMILIES.values() for stem in f.stems if f.reads(file_name) and stem in file_name]
    return max(fits, key=lambda pair: pair[0])[1] if fits else None


def family_named(name: str) -> AiterFamily | None:
    """The family ``aiter_<name>`` or ``<name>`` names, or ``None``."""
    return FAMILIES.get(name) or FAMILIES.get(f"aiter_{name}")
