"""Fits RMSNorm's ranking model (flyconfigs.kernels.rmsnorm.model) on measured tunings and
writes its weights with where they came from.

Data: every timed, spill-free candidate of every RMSNorm artifact in FOLDER (one tuning
run on one device); target: the log of its time over the best candidate of its key;
ridge regression.  The ridge strength is chosen by leave-one-N-out cross-validation
(each row length is held out in turn, the model fitted on the others picks a config
for each held-out key from that key's timed candidates, and the pick's time is compared
with the tuned winner): the figure that matters is how the model does on row lengths it
has not seen.  Keys it will be scored on must not be in FOLDER.

Most candidates were timed only in the tuner's screen, a shorter measurement than the
final that timed the winner, so the figures also give the share of picks whose time is
the final's (``picks_timed_in_final``), and the within-10% share on those alone.

    python bench/fit_rmsnorm_model.py artifacts/sm90 --product "NVIDIA H200" --preset perf --out kernels/rmsnorm/model.json

A folder that holds several devices' tunings needs ``--product``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import torch
from _common import artifacts_of, timed_in

from flyconfigs.kernels.rmsnorm.model import features
from flyconfigs.schema import Artifact

LAMBDAS = (1.0, 10.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)


def _timed(artifact: Artifact) -> list[Any]:
    return [c for c in artifact.candidates if c.timing and c.resources and not c.resources.spill_bytes]


def _rows(artifacts: list[Artifact]) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    x, y, group = [], [], []
    for i, artifact in enumerate(artifacts):
        timed = _timed(artifact)
        best = min(c.timing.median_us for c in timed)
        for c in timed:
            x.append(features(c.config, artifact.key, artifact.device, c.resources))
            y.append(math.log(c.timing.median_us / best))
            group.append(i)
    return torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64), group


def _fit(x: torch.Tensor, y: torch.Tensor, lam: float) -> torch.Tensor:
    eye = torch.eye(x.shape[1], dtype=x.dtype)
    eye[0, 0] = 0.0  # the intercept is not shrunk
    return torch.linalg.solve(x.T @ x + lam * eye, x.T @ y)


def _picks(weights: torch.Tensor, artifacts: list[Artifact], indices: list[int]) -> list[tuple[float, str]]:
    """Each key's pick over its tuned winner, with the protocol that timed the pick."""
    ratios = []
    for i in indices:
        artifact = artifacts[i]
        timed = _timed(artifact)
        scores = torch.tensor([features(c.config, artifact.key, artifact.device, c.resources) for c in timed],
                              dtype=torch.float64) @ weights
        pick = timed[int(torch.argmin(scores))]
        ratios.append((pick.timing.median_us / artifact.winner.timing.median_us, timed_in(pick, artifact)))
    return ratios


def _figures(picks: list[tuple[float, str]]) -> dict[str, float | None]:
    ratios = [r for r, _ in picks]
    final = [r for r, stage in picks if stage == "final"]
    return {"within_10pct_of_tuned": sum(r <= 1.10 for r in ratios) / len(ratios),
            "geomean_slowdown_vs_tuned": math.exp(sum(map(math.log, ratios)) / len(ratios)),
            "worst_slowdown_vs_tuned": max(ratios),
            "picks_timed_in_final": len(final) / len(ratios),
            "within_10pct_of_tuned_final_picks": sum(r <= 1.10 for r in final) / len(final) if final else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument("--preset", help="fit only on the keys of this preset of the kernel (e.g. perf)")
    parser.add_argument("--product", help="fit on this device's tunings only (when FOLDER holds several)")
    args = parser.parse_args()
    found = artifacts_of(args.folder, "rmsnorm", args.product)
    if args.preset:
        from flyconfigs.kernels.rmsnorm import SPEC
        from flyconfigs.schema.canonical import canonical_text
        from flyconfigs.tuner.grid import parse_grids

        wanted = {canonical_text(k) for k in parse_grids([args.preset], SPEC)}
        found = [(p, a) for p, a in found if canonical_text(dict(a.key)) in wanted]
    found = [(p, a) for p, a in found if a.selection.measured and _timed(a)]
    paths, artifacts = [p for p, _ in found], [a for _, a in found]
    x, y, group = _rows(artifacts)
    row_lengths = sorted({int(a.key["N"]) for a in artifacts})
    cv: dict[str, dict[str, float]] = {}
    for lam in LAMBDAS:
        ratios: list[tuple[float, str]] = []
        for held in row_lengths:
            train = [j for j, g in enumerate(group) if int(artifacts[g].key["N"]) != held]
            weights = _fit(x[train], y[train], lam)
            ratios += _picks(weights, artifacts, [i for i, a in enumerate(artifacts) if int(a.key["N"]) == held])
        cv[str(lam)] = _figures(ratios)
        print(f"lambda {lam:>8}: leave-one-N-out {cv[str(lam)]}", flush=True)
    chosen = max(LAMBDAS, key=lambda lam: (cv[str(lam)]["within_10pct_of_tuned"],
                                             -cv[str(lam)]["geomean_slowdown_vs_tuned"]))
    weights = _fit(x, y, chosen)
    payload = {
        "model": "rmsnorm-ridge",
        "version": args.version,
        "target": "log(median_us / best median_us of the key)",
        "lambda": chosen,
        "fitted_on": {"device": artifacts[0].device.identity.describe(), "keys": len(artifacts),
                      "candidates": int(x.shape[0]), "row_lengths": row_lengths,
                      "files": [p.name for p in paths]},
        "leave_one_row_length_out": cv,
        "weights": [float(w) for w in weights],
    }
    args.out.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(f"lambda {chosen}: {cv[str(chosen)]} -> {args.out}")


if __name__ == "__main__":
    main()
