"""Where the tuner's and the benchmark's timings of one config of the op part: for each
shape, the same configs timed in one process under the protocol of
flyconfigs.tuner.timing, in set-ups that differ in one thing at a time:

- ``tuner``: the tuner's own workload (``RMSNormWorkload``: rotated inputs and outputs
  allocated before capture; every replay writes the same outputs again);
- ``bench``: the benchmark's buffers (rotated inputs; every call allocates its output
  during capture and keeps it, as ``bench/rmsnorm.py --outputs kept`` does).

Each round times, interleaved: (1) every config in both set-ups together with the
benchmark's copy kernel, (2) the configs alone in the tuner's set-up, as the tuner's final
stage does, (3) the configs alone in the benchmark's set-up, (4) the configs through the
tuner's measurer (``GPUMeasurer``) in this process, (5) the same through the tuner's
worker process, as ``flyconfigs tune`` times them, and (6) that again with the replays
not held behind a spin kernel (``TimingPlan.hold``), as every timing was before the hold.
Rounds repeat (``--rounds``), so the spread between rounds shows how far the machine's
state moves.

With ``--tune-steps`` each shape then goes through what a tune run does to its worker
before the final timing, the configs timed after each step in the same worker, held and
not held: fresh, after checking every candidate of the key's space (compiled ahead by the
tuner's toolchain, as a run does), after the screen of all of them, while the toolchain
compiles another key's space, and after a restart.  The tuner's measurer now unloads
every variant but the timed ones before it times, so these steps no longer move its
figures; ``bench/loaded_code.py`` shows what they do in one process.  Writes ``--out``
(JSON); needs a GPU.

    python bench/timing_context.py --grid "M=2,4 N=4096 dtype=bf16" --config JSON ... --out FILE
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import accepted_configs, configs_parser, timed, write_graph_run  # noqa: E402
from rmsnorm import grid, launcher  # noqa: E402

from flyconfigs.gpu import get_backend  # noqa: E402
from flyconfigs.kernels.plugin import tunable_kernel  # noqa: E402
from flyconfigs.kernels.rmsnorm import traffic_bytes  # noqa: E402
from flyconfigs.kernels.rmsnorm.op import kernel_for  # noqa: E402
from flyconfigs.kernels.rmsnorm.workload import RMSNormWorkload  # noqa: E402
from flyconfigs.registry import DeviceQuery  # noqa: E402
from flyconfigs.schema import Device  # noqa: E402
from flyconfigs.tuner.measure_gpu import GPUMeasurer  # noqa: E402
from flyconfigs.tuner.key import candidate_configs, rotation  # noqa: E402
from flyconfigs.tuner.options import TuneOptions  # noqa: E402
from flyconfigs.tuner.timing import Measurement, TimingPlan, measure, plan_rotation, summarize  # noqa: E402
from flyconfigs.tuner.toolchain import GPUToolchain  # noqa: E402
from flyconfigs.tuner.worker import Worker, available_cpus  # noqa: E402


def set_ups(key: dict[str, Any], configs: dict[str, dict[str, Any]], copies: int) -> tuple[
        dict[str, Callable[[int], None]], dict[str, Callable[[int], None]], Callable[[int], None], list[Any]]:
    """The tuner's runs and the benchmark's runs of each config over ``copies`` rotated
    inputs (the same inputs for both), the benchmark's copy kernel, and what keeps the
    benchmark's outputs alive."""
    backend = get_backend()
    workload = RMSNormWorkload(key, copies, backend)
    tuner = {name: workload.launcher(c) for name, c in configs.items()}
    bench_calls: dict[str, Callable[[int], Any]] = {
        name: launcher(kernel_for(backend, c, key), c, workload.xs, workload.w) for name, c in configs.items()}
    bench_calls["copy"] = lambda i: torch.mul(workload.xs[i], 1.0)
    bench, kept = timed(bench_calls, copies, "kept")
    copy = bench.pop("copy")
    return tuner, bench, copy, [kept, workload]


def summaries(names: list[str], measured: list[Measurement] | list[list[float]], traffic: int,
              prefix: str = "") -> dict[str, dict[str, float]]:
    """The timing summary of each named config, from its measurement or its per-call
    samples (as a worker returns them)."""
    return {prefix + k: summarize(m if isinstance(m, Measurement) else Measurement(tuple(m)), traffic)
            for k, m in zip(names, measured, strict=True)}


def tune_steps(key: dict[str, Any], names: list[str], listed: list[dict[str, Any]], traffic: int,
               samples: int, toolchain: GPUToolchain) -> dict[str, dict[str, dict[str, float]]]:
    """The configs timed in one tuner worker after each step a tune run takes for ``key``,
    with the tuner's default rotation (see the module's docstring)."""
    options = TuneOptions()
    kernel = tunable_kernel("rmsnorm")
    worker = Worker("flyconfigs.tuner.measure_gpu:GPUMeasurer", {"kernel": "rmsnorm", "backend": None, "ordinal": 0})
    device = Device.model_validate(worker.device)
    final = rotation(traffic, device, options, options.final_target_us)
    screen = rotation(traffic, device, options, options.screen_target_us)
    space = candidate_configs(kernel, key, device, None)
    out: dict[str, dict[str, dict[str, float]]] = {}

    def timed_now(stage: str) -> None:
        out[stage] = summaries(names, worker.time(listed, final.launches, samples, options.warmup), traffic)
        out[stage + ", unheld"] = summaries(names, worker.time(listed, final.launches, samples, options.warmup,
                                                               hold=False), traffic)

    try:
        worker.prepare(key, final.copies, traffic)
        timed_now("fresh")
        errors = toolchain.compile_all(kernel, key, space, device)
        verified = [c for c, e in zip(space, errors, strict=True) if e is None and worker.check(c).status == "ok"]
        timed_now(f"after checking {len(verified)}")
        worker.time(verified, min(screen.launches, final.launches), options.screen_samples, 1)
        timed_now("after the screen")
        dtype = "fp16" if key["dtype"] != "fp16" else "bf16"
        other = {**key, "dtype": dtype, "weight_dtype": dtype}
        compiling = threading.Thread(target=toolchain.compile_all,
                                     args=(kernel, other, candidate_configs(kernel, other, device, None), device))
        compiling.start()
        time.sleep(1.0)
        timed_now(f"while compiling {other['dtype']}'s space")
        compiling.join()
        worker.restart()
        worker.prepare(key, final.copies, traffic)
        timed_now("after a restart")
    finally:
        worker.close()
    return out


def main() -> None:
    parser = configs_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tune-steps", action="store_true",
                        help="also time the configs after each step a tune run takes (see above)")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    device = get_backend().device()
    query = DeviceQuery.of(device.identity)
    started = time.time()
    rows = []
    measurer = GPUMeasurer("rmsnorm")
    worker = Worker("flyconfigs.tuner.measure_gpu:GPUMeasurer", {"kernel": "rmsnorm", "backend": None, "ordinal": 0})
    toolchain = GPUToolchain("cuda" if torch.version.hip is None else "hip", available_cpus())
    try:
        for m, n, dtype, wdtype in grid(False, args.grid):
            key = {"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype}
            configs, _ = accepted_configs(args.config, key, query)
            traffic = traffic_bytes(m, n, dtype, wdtype)
            plan = plan_rotation(traffic, props.L2_cache_size, memory_budget=16 << 30)
            plan = TimingPlan(plan.copies, plan.launches, samples=args.samples)
            tuner, bench, copy, keep = set_ups(key, configs, plan.copies)
            names = list(configs)
            measurer.prepare(key, plan.copies, traffic)
            worker.prepare(key, plan.copies, traffic)
            listed = [configs[k] for k in names]

            rounds = []
            for _ in range(args.rounds):
                together = measure([*(tuner[k] for k in names), *(bench[k] for k in names), copy], plan)
                alone_tuner = measure([tuner[k] for k in names], plan)
                alone_bench = measure([bench[k] for k in names], plan)
                in_process = measurer.time(listed, plan.launches, plan.samples, plan.warmup)
                in_worker = worker.time(listed, plan.launches, plan.samples, plan.warmup)
                unheld = worker.time(listed, plan.launches, plan.samples, plan.warmup, hold=False)
                rounds.append({
                    "together": {**summaries(names, together[:len(names)], traffic, "tuner "),
                                 **summaries(names, together[len(names):-1], traffic, "bench "),
                                 "copy": summarize(together[-1], traffic)},
                    "tuner alone": summaries(names, alone_tuner, traffic),
                    "bench alone": summaries(names, alone_bench, traffic),
                    "measurer": summaries(names, in_process, traffic),
                    "worker": summaries(names, in_worker, traffic),
                    "worker, unheld": summaries(names, unheld, traffic),
                })
            del tuner, bench, copy, keep
            torch.cuda.empty_cache()
            row = {**key, "traffic_bytes": traffic, "copies": plan.copies, "launches_per_replay": plan.launches,
                   "configs": configs, "rounds": rounds}
            for i, r in enumerate(rounds):
                line = "  ".join(f"{k}: " + " ".join(f"{v['median_us']:.3f}" for v in part.values())
                                 for k, part in r.items())
                print(f"{m} x {n} {dtype}/{wdtype} round {i}: {line}", flush=True)
            if args.tune_steps:
                row["tune_steps"] = tune_steps(key, names, listed, traffic, args.samples, toolchain)
                for stage, part in row["tune_steps"].items():
                    print(f"{m} x {n} {dtype}/{wdtype} {stage}: " + " ".join(f"{v['median_us']:.3f}" for v in part.values()),
                          flush=True)
            rows.append(row)
            write_graph_run(args.out, "timing-context", rows, device, started, None)
    finally:
        worker.close()
        toolchain.close()
    write_graph_run(args.out, "timing-context", rows, device, started, {"shapes": len(rows)})


if __name__ == "__main__":
    main()
