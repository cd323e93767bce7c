"""How well the tuner's timing of a winner foretells what the benchmark measures for it:
for every row of a ``bench/rmsnorm.py`` result whose served config is the winner of an
artifact of the benchmark's own device for that key, the op's median in the benchmark
over the winner's median in the artifact.  Rows served anything else (the default, a
nearest key, another device's tuning) are counted and left out.  Runs anywhere: it reads
the two files only.

    python bench/tuned_vs_benchmark.py bench/results/rmsnorm-h200.json artifacts/sm90 \\
        --out bench/results/tuned-vs-benchmark-h200.json

Groups: one block a row or a cluster, by M (≤ 16, 17–1024, > 1024).  A ratio above 1 is
a winner slower in the benchmark than the tuner measured it.  The rows at M ≤ 16 are also
split at the median of the row's empty-kernel time, the floor of a launch in that row:
the same empty kernel takes longer in some rows than in others, and so does everything
else timed there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import artifacts_of, write_result  # noqa: E402

from flyconfigs.kernels.rmsnorm import SPEC  # noqa: E402

KERNEL = "rmsnorm"


def _band(m: int) -> str:
    return "M<=16" if m <= 16 else "M<=1024" if m <= 1024 else "M>1024"


def _shape(row: dict[str, Any]) -> str:
    return "cluster" if row["config"]["cluster"] > 1 else "one block"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _figures(ratios: list[float]) -> dict[str, Any]:
    return {"rows": len(ratios), "median": statistics.median(ratios), "p10": _quantile(ratios, 0.1),
            "p90": _quantile(ratios, 0.9), "over_1.05": sum(x > 1.05 for x in ratios),
            "over_1.10": sum(x > 1.10 for x in ratios)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, help="a bench/rmsnorm.py result")
    parser.add_argument("artifacts", type=Path, help="the folder of artifacts it served")
    parser.add_argument("--out", type=Path, help="where to write the comparison (JSON)")
    args = parser.parse_args()
    result = json.loads(args.result.read_text())
    product = result["device"]["product"]
    winners: dict[tuple[Any, ...], Any] = {}
    for _, artifact in artifacts_of(args.artifacts, KERNEL, product):
        if artifact.winner.timing is not None:
            key = dict(artifact.key)
            winners[(key["M"], key["N"], key["dtype"], key["weight_dtype"])] = artifact
    rows, other = [], 0
    for row in result["rows"]:
        artifact = winners.get((row["M"], row["N"], row["dtype"], row["weight_dtype"]))
        served = SPEC.complete_config(row["served_config"])
        if artifact is None or SPEC.complete_config(dict(artifact.winner.config)) != served:
            other += 1
            continue
        tuned, measured = artifact.winner.timing.median_us, row["results"]["flyconfigs"]["median_us"]
        rows.append({"key": dict(artifact.key), "config": served, "tuned_us": tuned, "benchmark_us": measured,
                     "empty_us": row["results"].get("empty", {}).get("median_us"), "ratio": measured / tuned})
    shapes = ("one block", "cluster")
    order = [f"{shape}, {band}" for shape in shapes for band in ("M<=16", "M<=1024", "M>1024")]
    grouped: dict[str, list[float]] = {}
    for r in rows:
        grouped.setdefault(f"{_shape(r)}, {_band(r['key']['M'])}", []).append(r["ratio"])
    small = [r for r in rows if r["key"]["M"] <= 16 and r["empty_us"] is not None]
    if small:
        split = statistics.median(r["empty_us"] for r in small)
        halves = (f"empty <= {split:.2f} us", f"empty > {split:.2f} us")
        order += [f"{shape}, M<=16, {half}" for half in halves for shape in shapes]
        for r in small:
            grouped.setdefault(f"{_shape(r)}, M<=16, {halves[r['empty_us'] > split]}", []).append(r["ratio"])
    groups = {name: _figures(grouped[name]) for name in order if name in grouped}
    for name, g in groups.items():
        print(f"{name:40s} {g['rows']:4d} rows  median {g['median']:.3f}  p10 {g['p10']:.3f}  p90 {g['p90']:.3f}  "
              f"over 1.05: {g['over_1.05']}  over 1.10: {g['over_1.10']}")
    print(f"{len(rows)} rows served their own device's winner; {other} served something else")
    for r in sorted(rows, key=lambda r: -r["ratio"])[:8]:
        print(f"  {r['ratio']:.3f}  {r['key']}  tuned {r['tuned_us']:.3f} us, benchmark {r['benchmark_us']:.3f} us, "
              f"cluster {r['config']['cluster']}")
    if args.out:
        write_result(args.out.stem, {"what": __doc__.split("\n\n")[0], "result": args.result.name,
                                     "product": product, "groups": groups, "rows_compared": len(rows),
                                     "rows_served_otherwise": other, "rows": rows}, args.out.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
