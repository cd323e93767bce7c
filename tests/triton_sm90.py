"""Compile Triton configs of the fused add + RMSNorm kernel for sm90 without a GPU
(Triton's compiler and NVIDIA's ptxas) and print, per config, its registers, local
(spill) bytes and the cache operators its PTX uses, as JSON lines.  Run as a script in
a process without ``TRITON_INTERPRET`` (Triton decides at import whether it interprets):

    python tests/triton_sm90.py M N DTYPE

``tests/test_fused_add_rmsnorm_sm90.py`` runs it."""

from __future__ import annotations

import json
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from flyconfigs.gpu.cubin import kernel_usage
from flyconfigs.kernels.fused_add_rmsnorm import SPEC
from flyconfigs.kernels.fused_add_rmsnorm.kernel import fused_add_rmsnorm_kernel as kernel
from flyconfigs.kernels.fused_add_rmsnorm.workload import triton_arguments
from flyconfigs.registry import DeviceQuery

POINTER = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32"}
CONSTANTS = ("N", "BLOCK_N", "ROWS", "STAGES", "TAIL", "HINTS", "W_EARLY")


def main() -> None:
    m, n, dtype = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    key = {"M": m, "N": n, "dtype": dtype, "weight_dtype": dtype}
    device = DeviceQuery("nvidia", "sm90", "NVIDIA H100 80GB HBM3", 132, ())
    pointer = POINTER[dtype]
    signature = {"X": pointer, "R": pointer, "W": pointer, "Y": pointer, "M": "i32", "stride_x": "i32",
                 "stride_r": "i32", "stride_y": "i32", "eps": "fp32", **{c: "constexpr" for c in CONSTANTS}}
    for config in SPEC.triton_space(key, device):
        args = triton_arguments(config, n)
        constexprs = {(kernel.arg_names.index(c),): args[c] for c in CONSTANTS}
        compiled = triton.compile(ASTSource(kernel, signature, constexprs=constexprs), target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": args["num_warps"], "num_stages": args["num_stages"]})
        registers, local, _ = kernel_usage(compiled.asm["cubin"], compiled.metadata.name)
        ptx = compiled.asm["ptx"]
        print(json.dumps({"config": config, "registers": registers, "local_bytes": local,
                          "evict_first": ptx.count("evict_first"), "evict_last": ptx.count("evict_last"),
                          "streaming_stores": ptx.count("st.global.cs")}), flush=True)


if __name__ == "__main__":
    main()
