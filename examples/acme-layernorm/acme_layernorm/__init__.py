"""LayerNorm forward (y, each row's mean and 1/std) declared for flyconfigs; no torch, no Triton here."""

from flyconfigs.kernels.triton_family import TritonFamily

BLOCKS = (512, 1024, 2048, 4096, 8192, 16384)


def whole_row(n):
    return next((b for b in BLOCKS if b >= n), None)


def default(key, device):
    # The row in one block; AMD's 64-wide wavefronts want half the warps of NVIDIA's 32-wide ones.
    block = whole_row(key["N"]) or BLOCKS[-1]
    warps = min(max(block // 256, 1), 16)
    return {"BLOCK_N": block, "num_warps": max(warps // 2, 1) if device and device.vendor == "amd" else warps}


SPEC = TritonFamily(
    name="acme_layernorm",
    configs={"BLOCK_N": BLOCKS, "num_warps": (1, 2, 4, 8, 16)},
    default=default,
    # The kernel holds a row in one block: a narrower block cannot run.
    rules=lambda config, key: None if config["BLOCK_N"] >= key["N"] else "the row must fit one block",
    # A nearby key's winner whose block is too narrow here is widened to hold the row.
    adapt=lambda config, key, device: {**config, "BLOCK_N": whole_row(key["N"])} if whole_row(key["N"]) else None,
    inputs="acme_layernorm.kernel:inputs",    # inputs(key, device) -> (x, weight, bias)
    outputs="acme_layernorm.kernel:outputs",  # outputs(x, weight, bias) -> (y, mean, rstd)
    launch="acme_layernorm.kernel:launch",    # launch(config, x, weight, bias, y, mean, rstd)
    reference="acme_layernorm.kernel:reference",  # reference(x, weight, bias) -> float64 (y, mean, rstd)
    presets={"small": ("M=1,4096 N=1024,8192 dtype=bf16",)},
)
