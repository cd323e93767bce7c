"""How the time of one call of the op moves with the code this process has loaded: the
same configs timed in one process, under the protocol of flyconfigs.tuner.timing, after
each step that loads or unloads variants of the op:

- ``fresh``: only the timed configs loaded (twice, for the spread of one state);
- ``after 200 graphs of the timed``: 40 more short timings of the same configs, which
  build and destroy graphs but load nothing;
- ``after checking the space``: every candidate of the key's space loaded and run once,
  as the tuner's verify stage does;
- ``after the screen``: every candidate also timed once, as the tuner's screen did
  before it timed in groups;
- ``after unloading the rest``: all but the timed configs unloaded
  (``flyconfigs.kernels.rmsnorm.op.unload_kernels``);
- ``after loading them again`` and ``after a second screen``.

Writes ``--out`` (JSON); needs a GPU.

    python bench/loaded_code.py --grid "M=2,4 N=4096 dtype=bf16" --config JSON ... --out FILE
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import accepted_configs, configs_parser, write_graph_run  # noqa: E402
from rmsnorm import grid  # noqa: E402

from flyconfigs.gpu import get_backend  # noqa: E402
from flyconfigs.kernels.plugin import tunable_kernel  # noqa: E402
from flyconfigs.kernels.rmsnorm import traffic_bytes  # noqa: E402
from flyconfigs.kernels.rmsnorm.op import kernel_for, unload_kernels  # noqa: E402
from flyconfigs.kernels.rmsnorm.workload import RMSNormWorkload  # noqa: E402
from flyconfigs.registry import DeviceQuery  # noqa: E402
from flyconfigs.tuner.key import candidate_configs  # noqa: E402
from flyconfigs.tuner.timing import TimingPlan, measure, plan_rotation, summarize  # noqa: E402


def steps(key: dict[str, Any], configs: dict[str, dict[str, Any]], samples: int) -> tuple[TimingPlan, dict[str, Any]]:
    """The rotation and each step's timings of ``configs`` at ``key``, starting from
    nothing of the op loaded."""
    backend = get_backend()
    device = backend.device()
    m, n = int(key["M"]), int(key["N"])
    names = list(configs)
    traffic = traffic_bytes(m, n, key["dtype"], key["weight_dtype"])
    rotation = plan_rotation(traffic, device.l2_bytes or 0, memory_budget=16 << 30)
    plan = TimingPlan(rotation.copies, rotation.launches, samples=samples)
    screen = TimingPlan(rotation.copies, min(148, rotation.launches), warmup=1, samples=5)
    space = candidate_configs(tunable_kernel("rmsnorm"), key, device, None)
    unload_kernels()
    workload = RMSNormWorkload(key, plan.copies, backend)
    stages: dict[str, dict[str, dict[str, float]]] = {}

    def timed(stage: str) -> None:
        measured = measure([workload.launcher(configs[k]) for k in names], plan)
        stages[stage] = {k: summarize(r, traffic) for k, r in zip(names, measured, strict=True)}
        print(f"{m} x {n} {key['dtype']}/{key['weight_dtype']} {stage:32s} "
              + " ".join(f"{r.median_us:.3f}" for r in measured), flush=True)

    timed("fresh")
    timed("fresh again")
    for _ in range(40):
        measure([workload.launcher(configs[k]) for k in names], screen)
    timed("after 200 graphs of the timed")
    for c in space:
        workload.check(c)
    timed(f"after checking the space ({len(space)})")
    measure([workload.launcher(c) for c in space], screen)
    timed("after the screen")
    unloaded = unload_kernels([kernel_for(backend, c, key) for c in configs.values()])
    timed(f"after unloading the rest ({unloaded})")
    for c in space:
        workload.check(c)
    timed("after loading them again")
    measure([workload.launcher(c) for c in space], screen)
    timed("after a second screen")
    return plan, stages


def main() -> None:
    parser = configs_parser(__doc__)
    args = parser.parse_args()
    device = get_backend().device()
    query = DeviceQuery.of(device.identity)
    started = time.time()
    rows = []
    for m, n, dtype, wdtype in grid(False, args.grid):
        key = {"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype}
        configs, _ = accepted_configs(args.config, key, query)
        plan, stages = steps(key, configs, args.samples)
        torch.cuda.empty_cache()
        rows.append({**key, "traffic_bytes": traffic_bytes(m, n, dtype, wdtype), "copies": plan.copies,
                     "launches_per_replay": plan.launches, "configs": configs, "stages": stages})
        write_graph_run(args.out, "loaded-code", rows, device, started, None)
    write_graph_run(args.out, "loaded-code", rows, device, started, {"shapes": len(rows)})


if __name__ == "__main__":
    main()
