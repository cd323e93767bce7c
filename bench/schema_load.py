"""How many typical artifacts (64 candidates) per second ``loads_artifact`` parses and
validates on one core.  Writes bench/results/schema_load.json.

    python bench/schema_load.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import time

from _common import quantiles, write_result
from factories import make_artifact

from flyconfigs.schema import loads_artifact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    raw = make_artifact(n_candidates=64).to_json_bytes()
    for _ in range(50):
        loads_artifact(raw)
    rates = []
    deadline = time.perf_counter() + args.seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(100):
            loads_artifact(raw)
        rates.append(100 / (time.perf_counter() - start))
    stats = quantiles(rates)
    path = write_result(
        "schema_load",
        {"artifact_bytes": len(raw), "candidates": 64, "artifacts_per_second": stats, "target_per_second": 5000},
    )
    print(f"loads_artifact: {stats['median']:.0f} artifacts/s median (p20 {stats['p20']:.0f}, p80 {stats['p80']:.0f}), {len(raw)} bytes each -> {path}")


if __name__ == "__main__":
    main()
