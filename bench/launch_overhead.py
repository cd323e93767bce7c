"""Host overhead per launch, in one run: the GPU layer's raw ``Kernel.launch`` on a torch
stream, the ``rms_norm`` op in eager mode (resolve + launch), and torch ``F.rms_norm``'s
own dispatch, beside cuda-python's bare ``cuLaunchKernel`` and a prepared launch of the GPU
layer (the driver's ``cuLaunchKernelEx`` called directly, and through cuda-python's wrapper) — each timed as wall time per call over many back-to-back calls on a tiny input,
so the host, not the GPU, is what is measured; the contenders interleaved.  Writes ``--out`` (JSON).

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
from flyconfigs.kernels import rms_norm
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.kernels.rmsnorm.op import kernel_for


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from cuda.bindings import driver

    results = {}
    for m, n in ((1, 4096), (16, 3584), (16, 16384)):
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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "launch_overhead", "machine": machine(), "torch": torch.__version__,
                                    "device": get_backend().device().model_dump(mode="json"),
                                    "direct_launch": get_backend().binding.launch_ex_address() is not None,
                                    "results": results},
                                   indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
