"""Fits RMSNorm's ranking model (:mod:`flyconfigs.kernels.rmsnorm.model`) on one device's
measured tunings and writes its weights (``model.json``) with where they came from.

    python -m flyconfigs.kernels.rmsnorm.fit_model FOLDER --out kernels/rmsnorm/model.json

FOLDER holds the tunings to fit on and nothing else (a tuning run's ``--out``; the shipped
weights were fitted on the H200's tunings of the benchmark grid that ``flyconfigs-sm90``
2026.12.4 shipped, kept in the tests' data so that a test refits them).  A folder that
holds several devices' tunings needs ``--product``.

Data: every timed, spill-free candidate of every measured RMSNorm artifact; target: the
log of its time over the best candidate of its key; ridge regression.  The ridge strength
is chosen by leave-one-row-length-out cross-validation: each row length is held out in
turn, the model fitted on the others picks a config for each held-out key from that key's
timed candidates, and the pick's time is compared with the tuned winner.  How the model
does on row lengths it has not seen is the figure that matters, so keys it will be scored
on must not be in FOLDER.  Most candidates were timed only in the tuner's screen, so the
figures also give the share of picks whose time is the final's
(``picks_timed_in_final``) and the within-10% share on those alone.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from flyconfigs.errors import FitError, FlyconfigsError
from flyconfigs.kernels.measured import artifacts_of, timed_in
from flyconfigs.kernels.rmsnorm.model import features
from flyconfigs.schema import Artifact, Candidate, write_atomic

__all__ = ["GOAL", "LAMBDAS", "dumps", "fit", "main"]

LAMBDAS = (1.0, 10.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)
"""The ridge strengths cross-validation chooses from."""
GOAL = 1.10
"""A pick within this factor of the tuned winner counts as good."""


def _n(artifact: Artifact) -> int:
    """The key's row length (RMSNorm's declaration types ``N`` as an int)."""
    n = artifact.key["N"]
    assert isinstance(n, int)
    return n


def _timed(artifact: Artifact) -> list[Candidate]:
    # A spilling candidate is never served by a prediction (predict skips it), so it
    # must not teach the model either.
    return [c for c in artifact.candidates if c.timing and c.resources and not c.resources.spill_bytes]


def _median(candidate: Candidate) -> float:
    assert candidate.timing is not None  # _timed keeps timed candidates only
    return candidate.timing.median_us


def _rows(artifacts: Sequence[Artifact]) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    x, y, group = [], [], []
    for i, artifact in enumerate(artifacts):
        timed = _timed(artifact)
        best = min(_median(c) for c in timed)
        for c in timed:
            assert c.resources is not None
            x.append(features(c.config, artifact.key, artifact.device, c.resources))
            y.append(math.log(_median(c) / best))
            group.append(i)
    return torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64), group


def _fit(x: torch.Tensor, y: torch.Tensor, lam: float) -> torch.Tensor:
    eye = torch.eye(x.shape[1], dtype=x.dtype)
    eye[0, 0] = 0.0  # the intercept is not shrunk
    weights: torch.Tensor = torch.linalg.solve(x.T @ x + lam * eye, x.T @ y)
    return weights


def _picks(weights: torch.Tensor, artifacts: Sequence[Artifact], indices: Sequence[int]) -> list[tuple[float, str]]:
    """Each key's pick over its tuned winner, with the protocol that timed the pick."""
    ratios: list[tuple[float, str]] = []
    for i in indices:
        artifact = artifacts[i]
        timed = _timed(artifact)
        scores = torch.tensor([features(c.config, artifact.key, artifact.device, c.resources)  # type: ignore[arg-type]
                               for c in timed], dtype=torch.float64) @ weights
        pick = timed[int(torch.argmin(scores))]
        winner = artifact.winner.timing
        assert winner is not None  # measured() keeps artifacts with a timed winner only
        ratios.append((_median(pick) / winner.median_us, timed_in(pick, artifact)))
    return ratios


def _figures(picks: Sequence[tuple[float, str]]) -> dict[str, float | None]:
    ratios = [r for r, _ in picks]
    final = [r for r, stage in picks if stage == "final"]
    return {"within_10pct_of_tuned": sum(r <= GOAL for r in ratios) / len(ratios),
            "geomean_slowdown_vs_tuned": math.exp(sum(map(math.log, ratios)) / len(ratios)),
            "worst_slowdown_vs_tuned": max(ratios),
            "picks_timed_in_final": len(final) / len(ratios),
            "within_10pct_of_tuned_final_picks": sum(r <= GOAL for r in final) / len(final) if final else None}


def fit(folder: str | Path, product: str | None = None, version: int = 1,
        progress: bool = False) -> dict[str, Any]:
    """The model document fitted on ``folder``'s measured RMSNorm tunings (``product``'s
    when given).

    Raises :class:`~flyconfigs.errors.FitError` naming the folder when it holds no
    measured RMSNorm artifact or several devices' without ``product``."""
    found = [(p, a) for p, a in artifacts_of(folder, "rmsnorm", product)
             if a.selection.measured and a.winner.timing and _timed(a)]
    if not found:
        raise FitError(f"{folder}: no measured RMSNorm artifact" + (f" of {product!r}" if product else ""))
    paths, artifacts = [p for p, _ in found], [a for _, a in found]
    x, y, group = _rows(artifacts)
    row_lengths = sorted({_n(a) for a in artifacts})
    cv: dict[str, dict[str, float | None]] = {}
    for lam in LAMBDAS:
        ratios: list[tuple[float, str]] = []
        for held in row_lengths:
            train = [j for j, g in enumerate(group) if _n(artifacts[g]) != held]
            weights = _fit(x[train], y[train], lam)
            ratios += _picks(weights, artifacts, [i for i, a in enumerate(artifacts) if _n(a) == held])
        cv[str(lam)] = _figures(ratios)
        if progress:
            print(f"lambda {lam:>8}: leave-one-N-out {cv[str(lam)]}", flush=True)
    # The most keys within 10% on unseen row lengths; the smaller mean slowdown breaks ties.
    chosen = max(LAMBDAS, key=lambda lam: (cv[str(lam)]["within_10pct_of_tuned"],
                                             -(cv[str(lam)]["geomean_slowdown_vs_tuned"] or 0.0)))
    weights = _fit(x, y, chosen)
    return {
        "model": "rmsnorm-ridge",
        "version": version,
        "target": "log(median_us / best median_us of the key)",
        "lambda": chosen,
        "fitted_on": {"device": artifacts[0].device.identity.describe(), "keys": len(artifacts),
                      "candidates": int(x.shape[0]), "row_lengths": row_lengths,
                      "files": [p.name for p in paths]},
        "leave_one_row_length_out": cv,
        "weights": [float(w) for w in weights],
    }


def dumps(document: dict[str, Any]) -> str:
    """``document`` as the shipped file's text (sorted keys, indent 1, a final newline)."""
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Fit, write ``--out`` atomically and print the cross-validation; 0 on success, 1
    when the tunings cannot be used (the error on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m flyconfigs.kernels.rmsnorm.fit_model",
                                     description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("folder", type=Path, help="a folder holding the tunings to fit on, and nothing else")
    parser.add_argument("--out", type=Path, required=True, help="the weights to write (kernels/rmsnorm/model.json)")
    parser.add_argument("--version", type=int, default=1, help="the model version the weights are recorded as")
    parser.add_argument("--product", help="fit on this device's tunings only (when FOLDER holds several)")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder}: no such folder")  # bad input on the command line: exit 2
    try:
        document = fit(args.folder, args.product, args.version, progress=True)
    except FlyconfigsError as exc:
        parser.exit(1, f"{parser.prog}: {exc}\n")
    write_atomic(args.out, dumps(document).encode("utf-8"))
    print(f"lambda {document['lambda']}: {document['leave_one_row_length_out'][str(document['lambda'])]} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
