"""What the row-normalisation families (RMSNorm, fused add + RMSNorm) share: their key —
``M`` rows and rows of ``N`` (both ordinal), the activation dtype, and the weight dtype,
which is the activation's or fp32 — and how their source digest is taken.  Imports
neither torch nor a GPU runtime."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from importlib import resources

from flyconfigs.errors import InvalidKeyError
from flyconfigs.registry.plugin import KernelDecl, KeyAxis, KeyValue, normalize_key

__all__ = [
    "DTYPES",
    "ELEMENT_BYTES",
    "HIDDEN_SIZE_GRID",
    "KEY_AXES",
    "MAX_INDEX",
    "MODEL_SIZE_GRID",
    "BETWEEN_GRID",
    "UNSEEN_GRID",
    "check_row_key",
    "complete_row_key",
    "pow2_ceil",
    "source_sha256",
    "source_text",
]

DTYPES = ("bf16", "fp16", "fp32")
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
MAX_INDEX = 2**31 - 1
"""The kernels take the row count as a 32-bit int."""
KEY_AXES = (
    KeyAxis("M", int, ordinal=True, minimum=1, maximum=MAX_INDEX),
    KeyAxis("N", int, ordinal=True, minimum=1, maximum=MAX_INDEX),
    KeyAxis("dtype", str, choices=DTYPES),
    KeyAxis("weight_dtype", str, choices=DTYPES),
)
_HIDDEN = "128,256,896,1024,1536,2048,2560,3072,3584,4096,5120,6144,7168,8192,12288,16384"
HIDDEN_SIZE_GRID = (
    f"M={','.join(str(1 << p) for p in range(17))} N={_HIDDEN} dtype=bf16",
    f"M=1,16,256,4096,65536 N={_HIDDEN} dtype=fp16",
    f"M=1,16,256,4096,65536 N={_HIDDEN} dtype=bf16 weight_dtype=fp32",
)
"""The hidden sizes of popular models: bf16 on every power-of-two M to 65536, and fp16
and bf16 with an fp32 weight on five M (both families' ``hidden`` preset)."""

# The hidden sizes of the open models people serve, each read from a public source that
# states it (docs/benchmarks.md repeats the table):
#
# - Llama 3.x: 3.2-1B 2048, 3.2-3B 3072, 3.1-8B 4096, 3.1/3.3-70B 8192, 3.1-405B 16384 —
#   meta-llama/llama-models, models/sku_list.py (arch_args "dim"), commit 8c88b8c.
# - Qwen2.5: 0.5B 896, 1.5B 1536, 3B 2048, 7B 3584, 14B and 32B 5120, 72B 8192; Qwen3: 0.6B
#   1024, 1.7B 2048, 4B 2560, 8B 4096, 14B and 32B 5120 — pytorch/torchtune,
#   torchtune/models/qwen2_5 and qwen3/_model_builders.py (embed_dim; each builder names its
#   Hugging Face model), commit bd2a0fc.
# - Mistral: 7B-v0.2 4096, Nemo-2407 5120, Mixtral-8x22B and Small-2409 6144, Large-2407
#   12288 — each model's Hugging Face config.json as transcribed, URL by URL, in
#   abhibambhaniya/GenZ-LLM-Analyzer, GenZ/Models/Model_sets/mistral.py, commit 091bdd0.
# - Gemma 2: 2B 2304, 9B 3584, 27B 4608; Gemma 3: 1B 1152, 4B 2560, 12B 3840, 27B 5376 —
#   google-deepmind/gemma, gemma/gm/nn/_gemma.py (embed_dim), commit 7691fd4.
# - DeepSeek V2 5120, V3 7168, and their MLA norms over kv_lora_rank 512 and q_lora_rank 1536
#   — deepseek-ai/DeepSeek-V3, inference/configs/config_236B.json and config_671B.json
#   ("dim", "kv_lora_rank", "q_lora_rank"), commit 9b4e978.
# - GPT-OSS 20b and 120b: 2880 — openai/gpt-oss, gpt_oss/torch/model.py (ModelConfig, which
#   the checkpoint's config.json fills), commit 0568dfc.
# - Phi-3-mini 3072, Phi-4 5120 — pytorch/torchtune phi3 and phi4 builders (as above);
#   Phi-3-medium 5120 — its config.json as transcribed in GenZ-LLM-Analyzer microsoft.py.
#
# Tensor-parallel shards, where a norm runs over a sharded dimension: 2880, 5376, 7168 and
# 12288 over 2, 4 and 8 GPUs (1440, 720, 360; 2688, 1344, 672; 3584, 1792, 896; 6144,
# 3072, 1536), the new sizes among them once.
_MODELS = "896,1024,1152,1536,2048,2304,2560,2880,3072,3584,3840,4096,4608,5120,5376,6144,7168,8192,12288,16384"
_SHARDS = "360,672,720,1344,1440,1792,2688"
MODEL_SIZE_GRID = (
    f"M=7,333,12345 N={_MODELS} dtype=bf16",
    f"M=1,3000 N={_SHARDS} dtype=bf16",
    "M=1,77,40000 N=512,1536 dtype=bf16",
    "M=3,1000 N=2880,4096,5376,7168,8192 dtype=bf16",
    "M=77,40000 N=2048,4096,8192 dtype=bf16",
    "M=7,3000 N=2880,4096,5120 dtype=fp16",
    "M=7,3000 N=2880,4096,7168 dtype=bf16 weight_dtype=fp32",
)
"""The hidden sizes of the open models people serve (the table above) and their
tensor-parallel shards, at row counts that are not powers of two, as a few grid lines
rather than the whole product: 108 keys, bf16 with a few fp16 and fp32-weight rows (both
families' ``models`` preset)."""
UNSEEN_GRID = (
    "M=5,1500,20000 N=640,2176,4864,10240 dtype=bf16",
    "M=96,6000 N=1216,3328,6656,13824 dtype=bf16",
    "M=5,6000 N=3328,10240 dtype=fp16",
    "M=96,1500 N=2176,4864 dtype=bf16 weight_dtype=fp32",
)
"""Row lengths and row counts no other preset names (28 keys, both families' ``unseen``
preset): tuned on a GPU only to measure how the configs served for keys no grid names
generalize (``bench/off_grid.py``), never published."""

BETWEEN_GRID = (
    "M=24,640,2800,12000 N=1792,5632,9216,14080 dtype=bf16",
    "M=200,5000 N=2816,11264,18432 dtype=bf16",
    "M=100000 N=2816,9216 dtype=bf16",
    "M=640,12000 N=5632 dtype=fp16",
    "M=2800 N=9216 dtype=bf16 weight_dtype=fp32",
)
"""Keys no other preset and no committed artifact names (27, both families' ``between``
preset), some past the tuned range (N = 18432, M = 100000): tuned on a GPU only to measure
the rule that serves keys between tuned ones against the default and against tuning
(``bench/off_grid.py``), never published."""


def check_row_key(decl: KernelDecl, key: Mapping[str, object], max_n: int = MAX_INDEX) -> dict[str, KeyValue]:
    """``key`` validated against ``decl``'s axes (see :func:`~flyconfigs.registry.normalize_key`);
    the weight must be the activation dtype or fp32 and the row at most ``max_n`` long (the
    longest row the family's kernel compiles for)."""
    norm = normalize_key(decl, key)
    if norm["weight_dtype"] not in (norm["dtype"], "fp32"):
        raise InvalidKeyError(f"weight_dtype {norm['weight_dtype']!r} must equal dtype {norm['dtype']!r} or be 'fp32'")
    if int(norm["N"]) > max_n:
        raise InvalidKeyError(f"key axis 'N' of {decl.name!r} must be <= {max_n}, got {norm['N']}")
    return norm


def complete_row_key(key: Mapping[str, KeyValue]) -> dict[str, KeyValue]:
    """``key`` with ``weight_dtype`` defaulting to ``dtype``, as a grid may leave it out."""
    out = dict(key)
    if "dtype" in out and "weight_dtype" not in out:
        out["weight_dtype"] = out["dtype"]
    return out


def pow2_ceil(value: int) -> int:
    """The smallest power of two at least ``value`` (1 for ``value`` ≤ 1)."""
    return 1 << max(0, (value - 1).bit_length())


@functools.cache
def source_text(file: str) -> str:
    """A kernel source shipped in ``flyconfigs.kernels``, read once: every compile
    request refers to this one string.  The tuner keeps each request it queued for a
    whole run, so a copy per request (20 kB each) held hundreds of MB for a large grid."""
    return resources.files("flyconfigs.kernels").joinpath(file).read_text(encoding="utf-8")


def source_sha256(file: str) -> str:
    """sha256 of :func:`source_text`, recorded in every artifact."""
    return hashlib.sha256(source_text(file).encode("utf-8")).hexdigest()
