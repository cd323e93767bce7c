"""Fits RMSNorm's learned default (flyconfigs.kernels.rmsnorm.default) on measured
tunings, scores it on row lengths it was not fitted on, and writes the table with where
it came from and its scores.

Data: every measured RMSNorm artifact in FOLDER of one device (one tuning run; a folder
that holds several devices' tunings needs ``--product``), each key with all its timed
candidates.  Scores, each against the key's tuned winner:

* ``leave_one_n_out``: for each tuned row length N, the table is built from the other
  row lengths alone and serves every key of N; the served config's time is the time
  the artifact measured for it (every config the table can serve is in the key's space,
  and the tuner timed the whole space);
* ``half_n_held_out``: the table is built from every other row length and serves the rest;
* ``rule_of_thumb``: the hand-written heuristic (where the key's space holds it, as the
  tuner timed the whole space);
* ``tuned_default``: what the tuner served as the default when it made the artifacts
  (the table shipped then, fitted on an earlier tuning of the same keys: not held out).

Most candidates were timed only in the tuner's screen, a shorter measurement than the
final that timed the winner; a served config's time comes from whichever timed it.  Each
score therefore also gives the keys whose served config was timed in the final apart
(``served_timed_in``), where the ratio compares like with like.

The shipped table is built from every key.

    python bench/fit_rmsnorm_default.py artifacts/sm90 --product "NVIDIA H200" --out kernels/rmsnorm/default.json
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import artifacts_of, timed_in, write_result

from flyconfigs.kernels.rmsnorm import default as rmsnorm_default
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.schema import Artifact
from flyconfigs.schema.models import wave_size_of_arch

KEEP = 8
"""Shapes kept per cell."""
WITHIN = 0.15
"""Largest log slowdown a kept shape may have (about 1.16×)."""
GOAL = 1.10


def _measured(folder: Path, product: str | None) -> list[Artifact]:
    artifacts = [a for _, a in artifacts_of(folder, "rmsnorm", product) if a.selection.measured and a.winner.timing]
    if not artifacts:
        raise SystemExit(f"{folder}: no measured RMSNorm artifact" + (f" of {product!r}" if product else ""))
    devices = {(a.device.arch, a.device.product, a.device.compute_units) for a in artifacts}
    if len(devices) != 1:
        raise SystemExit(f"{folder}: artifacts of several devices {sorted(devices)}; fit on one tuning run")
    return artifacts


def _timed(artifact: Artifact) -> list[tuple[dict[str, Any], float]]:
    return [(SPEC.complete_config(c.config), c.timing.median_us) for c in artifact.candidates if c.timing]


def _table(artifacts: list[Artifact]) -> rmsnorm_default.DefaultTable:
    units = artifacts[0].device.compute_units
    return rmsnorm_default.build([(a.key, _timed(a)) for a in artifacts], units, KEEP, WITHIN)


def _score(artifacts: list[Artifact], serve: Callable[[Artifact], dict[str, Any] | None]) -> dict[str, Any]:
    keys = []
    for artifact in artifacts:
        entries = {json.dumps(SPEC.complete_config(c.config), sort_keys=True): c for c in artifact.candidates if c.timing}
        config = serve(artifact)
        entry = entries.get(json.dumps(config, sort_keys=True)) if config is not None else None
        ratio = entry.timing.median_us / artifact.winner.timing.median_us if entry else None  # type: ignore[union-attr]
        keys.append({"key": dict(artifact.key), "config": config, "over_tuned": ratio,
                     "served_timed_in": timed_in(entry, artifact) if entry else None})
    by_stage = {stage: [k for k in keys if k["served_timed_in"] == stage] for stage in ("final", "screen")}
    return {**_summary(keys), "served_timed_in": {stage: _summary(staged) for stage, staged in by_stage.items()},
            "per_key": keys}


def _summary(keys: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [k["over_tuned"] for k in keys if k["over_tuned"] is not None]
    return {
        "keys": len(keys),
        "scored": len(ratios),
        "within_10_percent": sum(r <= GOAL for r in ratios) / len(keys) if keys else None,
        "geomean_over_tuned": math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None,
        "worst_over_tuned": max(ratios, default=None),
    }


def _held_out(artifacts: list[Artifact], folds: list[list[int]]) -> Callable[[Artifact], dict[str, Any] | None]:
    tables = {}
    for fold in folds:
        table = _table([a for a in artifacts if int(a.key["N"]) not in fold])
        for n in fold:
            tables[n] = table

    def serve(artifact: Artifact) -> dict[str, Any] | None:
        wave = wave_size_of_arch(artifact.device.arch)
        key = dict(artifact.key)
        return rmsnorm_default.choose(tables[int(key["N"])], key, artifact.device.compute_units,
                                      SPEC.candidates_on(key, artifact.device, wave))

    return serve


def _dumps(document: dict[str, Any]) -> str:
    """JSON with one table cell per line (small, and a refit reads as a diff of cells)."""
    cells = document["table"]["cells"]
    head = json.dumps({**document, "table": {**document["table"], "cells": []}}, indent=1, sort_keys=True)
    lines = ",\n".join(json.dumps(cell, sort_keys=True, separators=(",", ":")) for cell in cells)
    return head.replace('"cells": []', '"cells": [\n' + lines + "\n  ]") + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--product", help="fit on this device's tunings only (when FOLDER holds several)")
    parser.add_argument("--out", type=Path, required=True, help="the table to write (kernels/rmsnorm/default.json)")
    parser.add_argument("--results", type=Path, help="folder for the scores (default bench/results)")
    args = parser.parse_args()
    artifacts = _measured(args.folder, args.product)
    lengths = sorted({int(a.key["N"]) for a in artifacts})
    scores = {
        "leave_one_n_out": _score(artifacts, _held_out(artifacts, [[n] for n in lengths])),
        "half_n_held_out": _score([a for a in artifacts if lengths.index(int(a.key["N"])) % 2],
                                  _held_out(artifacts, [lengths[1::2]])),
        "rule_of_thumb": _score(artifacts, lambda a: SPEC.rule_of_thumb(dict(a.key), wave_size_of_arch(a.device.arch))),
        "tuned_default": _score(artifacts, lambda a: SPEC.complete_config(a.default.config) if a.default else None),
    }
    device = artifacts[0].device
    summary = {name: {k: v for k, v in s.items() if k != "per_key"} for name, s in scores.items()}
    document = {
        "version": 1,
        "fitted_on": {
            "device": f"{device.arch} {device.product!r} {device.compute_units} CUs",
            "artifacts": len(artifacts),
            "row_lengths": lengths,
            "keep": KEEP,
            "within": WITHIN,
        },
        "scores": summary,
        "table": rmsnorm_default.encode(_table(artifacts)),
    }
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(_dumps(document), encoding="utf-8")
    tmp.replace(args.out)
    path = write_result("rmsnorm-default-heldout", {"fitted_on": document["fitted_on"], "scores": scores}, args.results)
    for name, s in summary.items():
        staged = ", ".join(f"{stage} {t['within_10_percent']:.1%} of {t['keys']}"
                           for stage, t in s["served_timed_in"].items() if t["keys"])
        print(f"{name}: {s['within_10_percent']:.1%} of {s['keys']} keys within 10% of tuned, "
              f"geomean {s['geomean_over_tuned']:.3f}x, worst {s['worst_over_tuned']:.2f}x (served config timed in the {staged})")
    print(f"-> {args.out}, {path}")


if __name__ == "__main__":
    main()
