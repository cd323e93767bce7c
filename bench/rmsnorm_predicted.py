"""Measures RMSNorm's cost model on the GPU: for every key of the tuned folders, the
predicted winner (from ``flyconfigs predict`` artifacts for this GPU), the tuned winner
and the default heuristic, timed in one interleaved measurement (the tuner's protocol:
rotated inputs, graph replay, medians), each checked against the reference first.

    python -m bench.rmsnorm_predicted --tuned benchmark=artifacts/sm90 --tuned held-out=HELDOUT_DIR \\
        --predicted PREDICTED_DIR --out bench/results/rmsnorm-predicted-h200.json

Each ``--tuned LABEL=FOLDER`` is scored separately: name the grid the model was fitted on
as such, and score it on the others.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import machine
from flyconfigs.gpu import get_backend
from flyconfigs.kernels.measured import artifacts_of
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.kernels.rmsnorm.workload import RMSNormWorkload
from flyconfigs.schema.canonical import canonical_text
from flyconfigs.tuner.key import rotation
from flyconfigs.tuner.options import TuneOptions
from flyconfigs.tuner.timing import TimingPlan, measure


def _by_key(folder: Path, product: str) -> dict[str, Any]:
    """``folder``'s RMSNorm artifacts made for ``product``, by key (a folder may hold
    several products' tunings; only this GPU's are timed here)."""
    return {canonical_text(dict(a.key)): a for _, a in artifacts_of(folder, "rmsnorm", product)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tuned", action="append", required=True, metavar="LABEL=FOLDER")
    parser.add_argument("--predicted", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=15)
    args = parser.parse_args()
    import torch

    backend = get_backend()
    device = backend.device()
    options = TuneOptions()
    predicted = _by_key(args.predicted, device.product)
    rows: list[dict[str, Any]] = []
    started = time.time()
    for item in args.tuned:
        label, _, folder = item.partition("=")
        for text, tuned in _by_key(Path(folder), device.product).items():
            guess = predicted.get(text)
            if guess is None or guess.selection.rule != "predicted" or tuned.default is None:
                continue
            configs = [dict(tuned.winner.config), dict(guess.winner.config), dict(tuned.default.config)]
            key = dict(tuned.key)
            traffic = SPEC.traffic(key)
            final = rotation(traffic, device, options, options.final_target_us)
            workload = RMSNormWorkload(key, final.copies, backend, seed=7)
            for config in configs:
                wrong = workload.check(config)
                if wrong:
                    raise SystemExit(f"{key}: {config} is wrong: {wrong}")
            plan = TimingPlan(final.copies, final.launches, samples=args.samples)
            medians = [statistics.median(m.samples_us) for m in measure([workload.launcher(c) for c in configs], plan)]
            rows.append({"grid": label, "key": key, "tuned": configs[0], "predicted": configs[1], "default": configs[2],
                         "tuned_us": medians[0], "predicted_us": medians[1], "default_us": medians[2],
                         "model_predicted_us": next(c.predicted_us for c in guess.candidates
                                                    if dict(c.config) == configs[1])})
            print(f"{label} {key}: tuned {medians[0]:.2f} predicted {medians[1]:.2f} default {medians[2]:.2f} us",
                  flush=True)
            del workload
            torch.cuda.empty_cache()

    def figures(grid: str, field: str) -> dict[str, float]:
        ratios = [r[field] / r["tuned_us"] for r in rows if r["grid"] == grid]
        return {"keys": len(ratios), "within_10pct_of_tuned": sum(x <= 1.10 for x in ratios) / len(ratios),
                "geomean_slowdown_vs_tuned": math.exp(sum(map(math.log, ratios)) / len(ratios)),
                "worst_slowdown_vs_tuned": max(ratios)}

    grids = sorted({r["grid"] for r in rows})
    summary = {grid: {"predicted": figures(grid, "predicted_us"), "default": figures(grid, "default_us")}
               for grid in grids}
    payload = {"benchmark": "rmsnorm-predicted", "machine": machine(), "device": device.model_dump(mode="json"),
               "models": sorted({f"{a.provenance.model.name} {a.provenance.model.version}"
                                 for a in predicted.values() if a.provenance.model}), "wall_s": time.time() - started,
               "summary": summary, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
