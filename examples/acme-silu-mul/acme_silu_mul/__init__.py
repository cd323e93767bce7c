"""acme_silu_mul: ``out = silu(gate) * up * scale`` row by row, declared for flyconfigs.

This module is the declaration only (no torch, no Triton); the kernel, its launch and its
reference are in :mod:`acme_silu_mul.kernel`, imported where the kernel runs."""

from flyconfigs.kernels.triton_family import TritonFamily

BLOCKS = (256, 512, 1024, 2048, 4096)


def _default(key):
    # The whole row in one block, up to 4096 columns (chunks of 4096 beyond).
    block = next((b for b in BLOCKS if b >= key["N"]), BLOCKS[-1])
    return {"BLOCK_N": block, "num_warps": 4 if block <= 1024 else 8}


SPEC = TritonFamily(
    name="acme_silu_mul",
    configs={"BLOCK_N": BLOCKS, "num_warps": (1, 2, 4, 8)},
    default=_default,
    rules=lambda config, key: "more than 64 chunks per row" if -(-key["N"] // config["BLOCK_N"]) > 64 else None,
    inputs="acme_silu_mul.kernel:inputs",
    launch="acme_silu_mul.kernel:launch",
    reference="acme_silu_mul.kernel:reference",
    traffic_bytes=lambda key: 3 * key["M"] * key["N"] * {"bf16": 2, "fp16": 2, "fp32": 4}[key["dtype"]],
    presets={"small": ("M=1,4096 N=1024,8192 dtype=bf16",)},
)
