"""Do cache hints pay for RMSNorm?  The served config of each shape timed with each set of
the kernel's cache-hint bits (``FC_CACHE``), beside torch.compile, the copy and the empty
kernel, in one graph-replay run (the protocol of ``bench/rmsnorm.py``, outputs kept).

The bits (``rmsnorm.cu``): 1 the last read of x is evicted first, 2 reread's first read of
x stays in L2 (evict last), 4 y is stored streaming (``st.global.cs``), 8 the weight stays
in L2.  Every variant is checked against the float64 reference before it is timed.

Run on the GPU machine from ``bench/`` (``FLYCONFIGS_PATH`` naming the artifacts to serve):

    python rmsnorm_cache_hints.py --out results/rmsnorm-cache-hints-h200.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _common import OUTPUTS, timed, write_graph_run
from rmsnorm import DT, EPS, TOLERANCE, _compiled_expression, _empty_kernel, launcher, relative_error

from flyconfigs.gpu import CompileRequest, get_backend
from flyconfigs.kernels.rmsnorm import SPEC, reference_rms_norm, traffic_bytes
from flyconfigs.kernels.rmsnorm.op import _SIGNATURE
from flyconfigs.registry import DeviceQuery, resolve
from flyconfigs.tuner.timing import measure, plan_rotation, summarize

SHAPES = (
    (65536, 7168, "bf16", "bf16"), (65536, 8192, "bf16", "fp32"), (32768, 8192, "bf16", "bf16"),
    (65536, 12288, "bf16", "bf16"), (65536, 4096, "fp32", "fp32"), (65536, 16384, "bf16", "fp32"),
    (16384, 12288, "bf16", "bf16"), (65536, 4096, "bf16", "bf16"), (16384, 4096, "bf16", "bf16"),
    (512, 16384, "bf16", "bf16"), (1024, 16384, "bf16", "bf16"), (4096, 12288, "bf16", "fp32"),
    (4096, 16384, "bf16", "fp32"), (4096, 7168, "bf16", "fp32"), (4096, 4096, "bf16", "bf16"),
    (65536, 1024, "bf16", "bf16"), (16384, 256, "bf16", "bf16"), (4096, 896, "bf16", "bf16"),
    (1, 4096, "bf16", "bf16"), (16, 4096, "bf16", "bf16"),
)
HINTS = (0, 1, 4, 5, 8, 13)
REREAD_HINTS = (2, 3, 7, 15)
"""Bit 2 only changes the reread path: timed only where the served config rereads."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=15)
    args = parser.parse_args()
    backend = get_backend()
    device = DeviceQuery.of(backend.device().identity)
    wave = backend.device().wave_size
    empty = _empty_kernel()
    props = torch.cuda.get_device_properties(0)
    rows, started = [], time.time()
    for m, n, dtype, wdtype in SHAPES:
        key = {"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype}
        served = resolve(SPEC, key, device)
        config = dict(served.config)
        traffic = traffic_bytes(m, n, dtype, wdtype)
        plan = plan_rotation(traffic, props.L2_cache_size, memory_budget=16 << 30)
        plan = type(plan)(plan.copies, plan.launches, samples=args.samples)
        xs = [torch.randn(m, n, device="cuda").mul_(2).to(DT[dtype]) for _ in range(plan.copies)]
        w = (torch.rand(n, device="cuda") + 0.5).to(DT[wdtype])
        reference = reference_rms_norm(xs[0], w, EPS)
        compiled = _compiled_expression()
        calls = {"copy": lambda i: torch.mul(xs[i], 1.0), "empty": lambda i: empty(),
                 "torch.compile": lambda i: compiled(xs[i], w)}
        defines = tuple(SPEC.defines(config, key, wave))
        hints = HINTS + (REREAD_HINTS if config["row_storage"] == "reread" else ())
        errors: dict[str, float] = {}
        for bits in hints:
            request = CompileRequest(SPEC.source(), SPEC.entry, defines + ((f"-DFC_CACHE={bits}",) if bits else ()))
            call = calls[f"hints={bits}"] = launcher(backend.load(backend.compile(request), _SIGNATURE), config, xs, w)
            err = errors[f"hints={bits}"] = relative_error(call(0, torch.full_like(xs[0], float("nan"))), reference)
            if not err < TOLERANCE[dtype]:
                raise SystemExit(f"FC_CACHE={bits} is wrong on {key}: max relative error {err}")
        compiled(xs[0], w)
        runs, kept = timed(calls, plan.copies, "kept")
        names = list(runs)
        results = measure([runs[k] for k in names], plan)
        del runs, kept, calls
        row = {"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype, "served_config": config,
               "served_from": served.source, "max_relative_error": errors,
               "results": {k: summarize(r, traffic) for k, r in zip(names, results, strict=True)}}
        rows.append(row)
        peer = row["results"]["torch.compile"]["median_us"]
        print(f"{m:>6} x {n:<6} {dtype}/{wdtype} {config['row_storage']:<6} torch.compile {peer:8.2f}us  "
              + "  ".join(f"{k} {peer / v['median_us']:.3f}" for k, v in row["results"].items() if k.startswith("hints")),
              flush=True)
        torch.cuda.empty_cache()
    write_graph_run(args.out, "rmsnorm-cache-hints", rows, backend.device(), started, {"shapes": len(rows)},
                    {"outputs": "kept", "outputs_means": OUTPUTS["kept"]})


if __name__ == "__main__":
    main()
