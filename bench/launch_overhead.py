"""Host overhead per launch, in one run: the GPU layer's raw ``Kernel.launch`` on a torch
stream, the ``rms_norm`` op in eager mode (resolve + launch), and torch ``F.rms_norm``'s
own dispatch, beside cuda-python's bare ``cuLaunchKernel`` and a prepared launch of the GPU
layer (the driver's ``cuLaunchKernelEx`` called directly, and through cuda-python's wrapper) — each timed as wall time per call over many back-to-back calls on a tiny input,
so the host, not the GPU, is what is measured; the contenders interleaved.  The shapes
are the eager path of decoding (M ≤ 16 at model sizes, bf16); the summary says per shape
whether ``rms_norm(x, w)`` is no slower than ``F.rms_norm`` (the ratio of their medians,
both allocating their output).  ``fused_add_rms_norm(x, r, w)`` is timed the same way
against torch's eager composite (``r.add_(x)``, then ``F.rms_norm(r, …)``); should that
part fail, the RMSNorm results are written without it, with the error.  Writes ``--out`` (JSON).

    python -m bench.launch_overhead --out bench/results/launch-overhead-h200.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.common import machine, quantiles
from flyconfigs.gpu import get_backend
from flyconfigs.kernels import fused_add_rms_norm, rms_norm
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.kernels.rmsnorm.op import kernel_for

__all__ = ["fused_per_call_us", "per_call_us", "shape_summary"]


def per_call_us(fns: dict[str, Callable[[], object]], calls: int = 2000, repeats: int = 15) -> dict[str, dict[str, float]]:
    """Wall µs per call of each of ``fns``, the contenders interleaved: each sample runs
    every contender ``calls`` times back to back, in an order that rotates per sample."""
    names = list(fns)
    for fn in fns.values():
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn = fns[name]
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    return {name: quantiles(values) for name, values in samples.items()}


SHAPES = tuple((m, n) for n in (2880, 4096, 7168) for m in (1, 4, 16)) + ((16, 3584), (16, 16384))
"""M ≤ 16 at model sizes (GPT-OSS, Llama 3.1-8B, DeepSeek V3), and the two shapes of earlier runs."""
OP, PEER = "flyconfigs_op_eager_alloc", "F.rms_norm_eager"
FUSED_OP, FUSED_PEER = "fused_add_rms_norm_eager", "torch_add_then_F.rms_norm_eager"


def shape_summary(results: dict[str, dict[str, dict[str, float]]], op: str = OP,
                  peer: str = PEER) -> dict[str, dict[str, float | bool]]:
    """Per shape of ``results`` (shape → contender → quantiles) that timed both ``op``
    and ``peer``: the ratio of their median µs per call and whether ``op`` is no slower."""
    out: dict[str, dict[str, float | bool]] = {}
    for shape, row in results.items():
        if op in row and peer in row:
            ratio = row[op]["median"] / row[peer]["median"]
            out[shape] = {"ratio": ratio, "no_slower": ratio <= 1.0}
    return out


def fused_per_call_us(m: int, n: int) -> dict[str, dict[str, float]]:
    """Wall µs per call of ``fused_add_rms_norm(x, r, w)`` and of torch's eager composite
    at ``m`` × ``n`` bf16, interleaved; both update ``r`` in place and allocate their output."""
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 0.01
    r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(n, device="cuda", dtype=torch.bfloat16) + 0.5

    def composite() -> torch.Tensor:
        r.add_(x)
        return F.rms_norm(r, (n,), w, 1e-6)

    return per_call_us({FUSED_OP: lambda: fused_add_rms_norm(x, r, w, 1e-6), FUSED_PEER: composite})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from cuda.bindings import driver

    results = {}
    for m, n in SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.rand(n, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        backend = get_backend()
        key = {"M": m, "N": n, "dtype": "bf16", "weight_dtype": "bf16"}
        config = SPEC.default_config(key, None)
        kernel = kernel_for(backend, config, key)
        grid, block, shared = SPEC.grid(config, m)
        prepared = kernel.prepare(grid, block, shared)
        # The same prepared launch through cuda-python's cuLaunchKernel wrapper, the path
        # taken where the driver's cuLaunchKernelEx entry point is not found.
        direct = backend.binding.launch_ex_address()
        backend.binding._launch_ex = None
        via_bindings = kernel.prepare(grid, block, shared)
        backend.binding._launch_ex = direct
        stream = torch.cuda.current_stream().cuda_stream
        pointers = (x.data_ptr(), w.data_ptr(), y.data_ptr(), m, n, n, 1e-6)
        kernel.launch(grid, block, pointers, stream, shared)  # fills the argument slots the raw call reads
        params = ctypes.addressof(kernel._array)
        row = per_call_us({
            "cuda_bindings_launch": lambda: driver.cuLaunchKernel(kernel.function, *grid, *block, shared, stream, params, 0),
            "gpu_layer_launch": lambda: kernel.launch(grid, block, (x, w, y, m, n, n, 1e-6), stream, shared),
            "gpu_layer_prepared": lambda: prepared(pointers, stream),
            "gpu_layer_prepared_via_bindings": lambda: via_bindings(pointers, stream),
            "flyconfigs_op_eager": lambda: rms_norm(x, w, 1e-6, out=y),
            "flyconfigs_op_eager_alloc": lambda: rms_norm(x, w, 1e-6),
            "F.rms_norm_eager": lambda: F.rms_norm(x, (n,), w, 1e-6),
            "empty_torch_op": lambda: torch.empty_like(x),
        })
        results[f"{m}x{n}"] = row
        print(f"{m}x{n}: " + "  ".join(f"{k} {v['median']:.2f}us" for k, v in row.items()), flush=True)
    fused: dict[str, dict[str, dict[str, float]]] = {}
    fused_error = None
    try:
        for m, n in SHAPES:
            fused[f"{m}x{n}"] = row = fused_per_call_us(m, n)
            print(f"{m}x{n} fused: " + "  ".join(f"{k} {v['median']:.2f}us" for k, v in row.items()), flush=True)
    except Exception as exc:  # noqa: BLE001 - the RMSNorm figures are written whatever the fused op does
        fused_error = f"{type(exc).__name__}: {exc}"
        print(f"the fused op's part failed ({fused_error}); the RMSNorm results are written", flush=True)
    summary = {"rms_norm_vs_F.rms_norm": shape_summary(results),
               "fused_add_rms_norm_vs_torch_composite": shape_summary(fused, FUSED_OP, FUSED_PEER)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "launch_overhead", "machine": machine(), "torch": torch.__version__,
                                    "device": get_backend().device().model_dump(mode="json"),
                                    "direct_launch": get_backend().binding.launch_ex_address() is not None,
                                    "results": results, "fused_results": fused, "fused_error": fused_error,
                                    "summary": summary},
                                   indent=1, sort_keys=True) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
