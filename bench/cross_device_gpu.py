"""Times on this GPU the configs the cross-device check (``bench/cross_device.py``) could
not score from a tuning's recorded final times: each against the key's tuned winner, in
one interleaved measurement with the tuner's final protocol (rotated inputs, graph
replay, medians), both checked against the reference first.

    python -m bench.cross_device_gpu bench/results/cross-device-rmsnorm-sm90.json \\
        --out bench/results/cross-device-rmsnorm-sm90-gpu-h100.json

Which configs: every key predicted for this GPU's product (the check's ``predicted_for``)
whose method (``--method``, default ``predicted`` and ``borrowed``) served a config the
tuning never timed, or timed only in its shorter screen (leave those out with
``--untimed-only``).  Each (key, config) is timed once, whatever scenario asked for it.
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
from flyconfigs.schema.canonical import canonical_text

__all__ = ["main", "wanted"]


def wanted(result: dict[str, Any], product: str, methods: list[str], untimed_only: bool) -> list[dict[str, Any]]:
    """The (key, winner, config) triples of ``result`` to time on ``product``, each once,
    with the scenarios and methods that asked for it."""
    out: dict[str, dict[str, Any]] = {}
    for run in result["results"]:
        if run["predicted_for"] != product:
            continue
        for row in run["per_key"]:
            for method in methods:
                served = row[method]
                if served.get("config") is None or served["timed_in"] == "final":
                    continue
                if untimed_only and served["timed_in"] is not None:
                    continue
                text = canonical_text({"key": row["key"], "config": served["config"]})
                entry = out.setdefault(text, {"key": row["key"], "winner": row["winner"], "config": served["config"],
                                              "recorded": served["ratio"], "asked_by": []})
                entry["asked_by"].append(f"{run['scenario']} / {run['fitted_on']} / {method}")
    return list(out.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", type=Path, help="bench/cross_device.py's result file")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--method", action="append", help="predicted, borrowed, … (default: predicted and borrowed)")
    parser.add_argument("--untimed-only", action="store_true", help="leave out configs the tuning timed in its screen")
    parser.add_argument("--samples", type=int, default=15)
    args = parser.parse_args()
    import torch

    from flyconfigs.gpu import get_backend
    from flyconfigs.kernels.rmsnorm import SPEC
    from flyconfigs.kernels.rmsnorm.workload import RMSNormWorkload
    from flyconfigs.tuner.key import rotation
    from flyconfigs.tuner.options import TuneOptions
    from flyconfigs.tuner.timing import TimingPlan, measure

    backend = get_backend()
    device = backend.device()
    options = TuneOptions()
    todo = wanted(json.loads(args.result.read_text()), device.product, args.method or ["predicted", "borrowed"],
                  args.untimed_only)
    print(f"{len(todo)} configs to time on {device.product}", flush=True)
    started = time.time()
    rows = []
    for item in todo:
        key = item["key"]
        final = rotation(SPEC.traffic(key), device, options, options.final_target_us)
        workload = RMSNormWorkload(key, final.copies, backend, seed=7)
        configs = [item["winner"], item["config"]]
        for config in configs:
            wrong = workload.check(config)
            if wrong:
                raise SystemExit(f"{key}: {config} is wrong: {wrong}")
        plan = TimingPlan(final.copies, final.launches, samples=args.samples)
        winner_us, config_us = (statistics.median(m.samples_us)
                                for m in measure([workload.launcher(c) for c in configs], plan))
        rows.append({**item, "winner_us": winner_us, "config_us": config_us, "ratio": config_us / winner_us})
        print(f"{key}: winner {winner_us:.2f} us, served {config_us:.2f} us ({config_us / winner_us:.3f}x; "
              f"recorded {item['recorded']})", flush=True)
        del workload
        torch.cuda.empty_cache()
    ratios = [r["ratio"] for r in rows]
    summary = {"configs": len(rows), "within_3pct": sum(x <= 1.03 for x in ratios),
               "within_10pct": sum(x <= 1.10 for x in ratios),
               "geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
               "worst": max(ratios, default=None)}
    payload = {"benchmark": "cross-device-gpu", "machine": machine(), "device": device.model_dump(mode="json"),
               "source": str(args.result), "wall_s": time.time() - started, "summary": summary, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
