"""The dtype names a key uses (``bf16``, ``fp16``, ``fp32``) and the torch dtypes they
mean: the one table for the ops, the tuner's workloads, the benchmarks and the tests.
Imports torch; the declarations (``flyconfigs.kernels.rmsnorm``) never import this."""

from __future__ import annotations

import torch

__all__ = ["NAME_OF", "TORCH_DTYPES"]

TORCH_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
NAME_OF: dict[torch.dtype, str] = {dtype: name for name, dtype in TORCH_DTYPES.items()}
