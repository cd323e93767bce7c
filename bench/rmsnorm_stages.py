"""Where the RMSNorm kernel's time goes at small M: the served config timed beside variants
of the same source with one stage left out, and the copy and the empty kernel, in one
graph-replay run (the protocol of ``bench/rmsnorm.py``, outputs kept).

The variants are diagnostics, never served.  Those that leave a stage out are wrong on
purpose; the other ways of exchanging partial sums are checked against the reference.

``no-weight``
    the weight is not read (a constant 1.0 instead; bf16 rows held in registers only);
``no-reduction``
    each thread scales its elements by its own partial sum: no shuffles, no barrier
    across the row's waves;
``no-exchange``
    (configs with a cluster) the partial sums are not met across the cluster's blocks;
``no-weight-no-reduction``
    both weight and reduction left out: what is left is a load, a multiply and a store,
    the copy's work plus the FMAs;
``barrier-exchange``
    (configs with a cluster) not a stage left out but the exchange of ``flyconfigs-sm90``
    2026.12.8 to 2026.12.10: each block stores its partial into every block with plain
    distributed-shared-memory stores and one cluster barrier (release, acquire) ends the
    exchange, where the kernel now stores asynchronously and each block waits on its own
    mbarrier for the bytes it expects.  Correct, and the same sum on every block.
``pull-exchange``
    (configs with a cluster) the exchange before 2026.12.8: each block reads every
    block's partial after one barrier, and a second barrier keeps its shared memory alive
    while the others read.  Correct, and the same sum on every block.

For rows the served config keeps in one block, a cluster of 4 (128 threads, 16-byte
vectors) is timed beside it, with each exchange (``c4:full``, ``c4:barrier-exchange``,
``c4:pull-exchange``).

Run on the GPU machine from ``bench/`` (``FLYCONFIGS_PATH`` naming the artifacts to serve):

    python rmsnorm_stages.py --out results/rmsnorm-stages-h200.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _common import OUTPUTS, timed, write_graph_run
from rmsnorm import EPS, _empty_kernel, launcher, relative_error

from flyconfigs.gpu import CompileRequest, get_backend
from flyconfigs.kernels.rmsnorm import SPEC, cluster_of, reference_rms_norm, traffic_bytes
from flyconfigs.kernels.rmsnorm.op import _SIGNATURE
from flyconfigs.registry import DeviceQuery, resolve
from flyconfigs.tuner.timing import measure, plan_rotation, summarize

WEIGHT_LOAD = ("      load_words<VEC * WBYTES, W_READ>(reinterpret_cast<const char*>(w) + (long long)v * VEC * WBYTES, "
               "wraw[i], w_policy);\n")
# The kernel's exchange, which the exchange variants replace: thread 0 sets up the
# block's mbarrier, and lane r stores the partial into block r counted on it.
NO_BARRIER_SETUP = ("  if (threadIdx.x == 0) expect_bytes(bar, (unsigned int)(CLUSTER * ROWS * sizeof(float)));\n", "")
COUNTED_STORE = ("    if (lane < CLUSTER) cluster_store_counted(&cluster_partial[rank * ROWS + sub], bar, (unsigned int)lane, sum);\n"
                 "    wait_bytes(bar);\n")
CLUSTER_ARRIVE = '    asm volatile("barrier.cluster.arrive;" ::: "memory");\n'
"""A cluster arrive with release semantics, which the kernel itself no longer has."""
PATCHES: dict[str, list[tuple[str, str]]] = {
    "no-weight": [(WEIGHT_LOAD, "      for (int k = 0; k < WW; ++k) wraw[i][k] = 0x3f803f80u;  // bf16 1.0, twice\n")],
    "no-reduction": [("for (int offset = (TPR < WAVE ? TPR : WAVE) / 2;", "for (int offset = 0;"),
                     ("  if (WAVES_PER_ROW > 1) {\n", "  if (false) {\n")],
    "no-exchange": [("#if FC_CLUSTER > 1\n  // Every block's partial", "#if 0\n  // Every block's partial"),
                    ("#if FC_CLUSTER > 1\n  {\n", "#if 0\n  {\n")],
    "barrier-exchange": [
        NO_BARRIER_SETUP,
        (COUNTED_STORE,
         "    if (lane < CLUSTER) {\n"
         "      unsigned int at = (unsigned int)__cvta_generic_to_shared(&cluster_partial[rank * ROWS + sub]), far;\n"
         "      asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"(far) : \"r\"(at), \"r\"((unsigned int)lane));\n"
         "      asm volatile(\"st.shared::cluster.f32 [%0], %1;\" ::\"r\"(far), \"f\"(sum) : \"memory\");\n"
         "    }\n"
         + CLUSTER_ARRIVE + "    cluster_wait();\n"),
    ],
    "pull-exchange": [
        NO_BARRIER_SETUP,
        ("  cluster_arrive_relaxed();\n#endif\n", "#endif\n"),
        ("    const unsigned int rank = blockIdx.x % CLUSTER;\n"
         "    cluster_wait();\n" + COUNTED_STORE,
         "    if (lane == 0) cluster_partial[sub] = sum;\n"
         + CLUSTER_ARRIVE + "    cluster_wait();\n"),
        ("    for (int r = 0; r < CLUSTER; ++r) sum += cluster_partial[r * ROWS + sub];\n",
         "    for (int r = 0; r < CLUSTER; ++r) {\n"
         "      unsigned int at = (unsigned int)__cvta_generic_to_shared(&cluster_partial[sub]), far;\n"
         "      float value;\n"
         "      asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"(far) : \"r\"(at), \"r\"((unsigned int)r));\n"
         "      asm volatile(\"ld.shared::cluster.f32 %0, [%1];\" : \"=f\"(value) : \"r\"(far) : \"memory\");\n"
         "      sum += value;\n"
         "    }\n"
         + CLUSTER_ARRIVE),
        ("    store<FC_X_DTYPE, VEC, Y_STREAM>(yr + (long long)v * VEC * XBYTES, vals);\n  }\n}",
         "    store<FC_X_DTYPE, VEC, Y_STREAM>(yr + (long long)v * VEC * XBYTES, vals);\n  }\n  cluster_wait();\n}"),
    ],
}
PATCHES["no-weight-no-reduction"] = PATCHES["no-weight"] + PATCHES["no-reduction"]
CORRECT = {"full", "barrier-exchange", "pull-exchange"}
"""The variants whose results are right: checked against the float64 reference first."""
CLUSTER_OF_4 = {"cluster": 4, "occupancy": 0, "row_storage": "reg", "rows_per_block": 1, "threads": 128, "vector_bytes": 16}
SHAPES = ((1, 1024), (1, 4096), (1, 8192), (16, 1024), (16, 4096), (16, 8192), (1, 12288), (1, 16384), (16, 16384))


def patched(source: str, variant: str) -> str:
    """``source`` with ``variant``'s stages left out; every patch must apply once."""
    for old, new in PATCHES[variant]:
        if source.count(old) != 1:
            raise SystemExit(f"the patch {variant!r} no longer matches rmsnorm.cu: {old.strip()!r}")
        source = source.replace(old, new)
    return source


def _variants(config: dict) -> list[str]:
    """The variants that apply to ``config``."""
    variants = ["full", "no-reduction"]
    if config["row_storage"] == "reg":
        variants += ["no-weight", "no-weight-no-reduction"]
    if cluster_of(config) > 1:
        variants += ["no-exchange", "barrier-exchange", "pull-exchange"]
    return variants


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
    for m, n in SHAPES:
        key = {"M": m, "N": n, "dtype": "bf16", "weight_dtype": "bf16"}
        served = resolve(SPEC, key, device)
        config = dict(served.config)
        traffic = traffic_bytes(m, n, "bf16", "bf16")
        plan = plan_rotation(traffic, props.L2_cache_size, memory_budget=16 << 30)
        plan = type(plan)(plan.copies, plan.launches, samples=args.samples)
        xs = [torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(plan.copies)]
        w = (torch.rand(n, device="cuda") + 0.5).to(torch.bfloat16)
        reference = reference_rms_norm(xs[0], w, EPS)
        errors: dict[str, float] = {}
        plans = [("", config, _variants(config))]
        if cluster_of(config) == 1 and n >= 4096 and SPEC.check_config(CLUSTER_OF_4, key, device) is None:
            plans.append(("c4:", CLUSTER_OF_4, ["full", "barrier-exchange", "pull-exchange"]))
        calls = {"copy": lambda i: torch.mul(xs[i], 1.0), "empty": lambda i: empty()}
        for prefix, cfg, variants in plans:
            defines = tuple(SPEC.defines(cfg, key, wave))
            for variant in variants:
                source = SPEC.source() if variant == "full" else patched(SPEC.source(), variant)
                kernel = backend.load(backend.compile(CompileRequest(source, SPEC.entry, defines)), _SIGNATURE)
                call = calls[prefix + variant] = launcher(kernel, cfg, xs, w)
                if variant in CORRECT:
                    err = relative_error(call(0, torch.full_like(xs[0], float("nan"))), reference)
                    if not err < 2e-2:
                        raise SystemExit(f"{prefix + variant} is wrong at {m}x{n}: max relative error {err}")
                    errors[prefix + variant] = err
        runs, kept = timed(calls, plan.copies, "kept")
        names = list(runs)
        results = measure([runs[k] for k in names], plan)
        del runs, kept
        row = {"M": m, "N": n, "dtype": "bf16", "served_config": config, "served_from": served.source,
               "max_relative_error": errors, "results": {k: summarize(r, traffic) for k, r in zip(names, results, strict=True)}}
        rows.append(row)
        base = row["results"]["empty"]["median_us"]
        print(f"{m:>3} x {n:<6} " + "  ".join(f"{k} +{v['median_us'] - base:.2f}" for k, v in row["results"].items()
                                               if k != "empty"), flush=True)
    write_graph_run(args.out, "rmsnorm-stages", rows, backend.device(), started, {"shapes": len(rows)},
                    {"outputs": "kept", "outputs_means": OUTPUTS["kept"]})


if __name__ == "__main__":
    main()
