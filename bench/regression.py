"""Committed-config regression check: for every RMSNorm artifact in a folder tuned on this
GPU's product (a recorded time compares only with the product that recorded it), re-measure its
winner, its default and the other finalists it recorded (the candidates its final timed,
fastest first; then, if too few, the fastest its screen timed: a screen time is a shorter
measurement and is not ranked against a final one), interleaved in one run, and report the
winner against the best of them and against its own recorded time.  It re-measures; it never asks winners to be the same.
Writes ``--out`` (JSON).

    python -m bench.regression artifacts/sm90 --out bench/results/regression-h200.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.common import machine
from flyconfigs.gpu import get_backend
from flyconfigs.kernels.measured import timed_in
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.kernels.rmsnorm.workload import RMSNormWorkload
from flyconfigs.schema import Artifact, Candidate
from flyconfigs.schema.pack import folder_artifacts
from flyconfigs.tuner.timing import TimingPlan, measure


def _contenders(artifact: Artifact, finalists: int) -> list[Candidate] | None:
    """The winner's entry, then the default's and up to ``finalists`` others: final-timed
    candidates fastest first, then screen-timed ones; ``None`` when the winner was not timed."""
    timed = sorted((c for c in artifact.candidates if c.timing),
                   key=lambda c: (timed_in(c, artifact) != "final", c.timing.median_us))  # type: ignore[union-attr]
    winner = next((c for c in timed if dict(c.config) == dict(artifact.winner.config)), None)
    if winner is None:
        return None
    default = next((c for c in timed if artifact.default and dict(c.config) == dict(artifact.default.config)), None)
    contenders = [winner]
    for entry in [default, *timed]:
        if entry is not None and len(contenders) <= finalists and all(entry is not c for c in contenders):
            contenders.append(entry)
    return contenders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--finalists", type=int, default=5)
    args = parser.parse_args()
    backend = get_backend()
    product = backend.device().product
    rows, elsewhere = [], 0
    started = time.time()
    for artifact in folder_artifacts(args.folder, "rmsnorm"):
        path = Path(artifact.file_name())
        if artifact.device.product != product:
            elsewhere += 1
            continue
        contenders = _contenders(artifact, args.finalists)
        if contenders is None:
            print(f"{path.name}: its winner has no timing among its candidates (selection {artifact.selection.rule!r}); skipped")
            continue
        configs = [dict(c.config) for c in contenders]
        stages = [timed_in(c, artifact) for c in contenders]
        protocol = artifact.provenance.timing_protocol
        copies = max(1, protocol.rotate_bytes // SPEC.traffic(artifact.key)) if protocol else 1
        workload = RMSNormWorkload(artifact.key, copies, backend, seed=11)
        for config in configs:
            wrong = workload.check(config)
            if wrong:
                raise SystemExit(f"{path.name}: {config} is wrong now: {wrong}")
        plan = TimingPlan(copies=copies, launches=protocol.launches_per_sample if protocol else 20, warmup=3, samples=15)
        results = measure([workload.launcher(c) for c in configs], plan)
        medians = [statistics.median(r.samples_us) for r in results]
        row = {
            "key": dict(artifact.key),
            "file": path.name,
            "winner_recorded_us": artifact.winner.timing.median_us,
            "winner_remeasured_us": medians[0],
            "best_remeasured_us": min(medians),
            "winner_vs_best": medians[0] / min(medians),
            "winner_vs_recorded": medians[0] / artifact.winner.timing.median_us,
            "contenders": [{"config": c, "median_us": m, "recorded_timed_in": t} for c, m, t in zip(configs, medians, stages, strict=True)],
        }
        rows.append(row)
        print(f"{path.name}: winner {medians[0]:.2f} us, best {min(medians):.2f} us ({row['winner_vs_best']:.3f}), "
              f"recorded {artifact.winner.timing.median_us:.2f} us", flush=True)
        del workload
    within = [r["winner_vs_best"] <= 1.03 for r in rows]
    summary = {
        "artifacts": len(rows),
        "artifacts_of_other_products": elsewhere,
        "winner_within_3pct_of_best": sum(within),
        "max_winner_vs_best": max((r["winner_vs_best"] for r in rows), default=None),
        "median_winner_vs_recorded": statistics.median(r["winner_vs_recorded"] for r in rows) if rows else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "regression", "machine": machine(), "device": backend.device().model_dump(mode="json"),
                                    "wall_s": time.time() - started, "summary": summary, "rows": rows}, indent=1, sort_keys=True) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
