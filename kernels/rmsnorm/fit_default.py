"""Fits RMSNorm's learned default (:mod:`flyconfigs.kernels.rmsnorm.default`) on one
device's measured tunings, scores it on row lengths it was not fitted on, and writes the
table ``default.json`` with where it came from and its scores.

    python -m flyconfigs.kernels.rmsnorm.fit_default artifacts/sm90 --product "NVIDIA H200" \\
        --out kernels/rmsnorm/default.json

Data: every measured RMSNorm artifact of FOLDER of one device, each key with all its
timed candidates (the tuner times the whole space, so every config the table can serve
for a key has a time there).  Scores, each against the key's tuned winner:

* ``leave_one_n_out``: for each tuned row length N, a table built from the other row
  lengths alone serves every key of N;
* ``half_n_held_out``: a table built from every other row length serves the rest;
* ``rule_of_thumb``: the hand-written heuristic;
* ``tuned_default``: what the tuner served as the default when it made the artifacts (the
  table shipped then: not held out).

Each score also splits the keys by which protocol timed the served config
(``served_timed_in``): a screened time is a shorter measurement than the winner's final
one, so only the ``final`` half compares like with like.  The shipped table is built from
every key.  The same artifacts give the same bytes (a test refits the committed tunings
and compares them with the shipped file).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flyconfigs.errors import FitError, FlyconfigsError
from flyconfigs.kernels.measured import artifacts_of, timed_in
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.kernels.rmsnorm import default as rmsnorm_default
from flyconfigs.schema import Artifact, write_atomic
from flyconfigs.schema.models import wave_size_of_arch

__all__ = ["GOAL", "KEEP", "WITHIN", "dumps", "fit", "main", "measured"]

KEEP = 16
"""Shapes kept per cell.  A shape a cell does not keep costs
:data:`~flyconfigs.kernels.rmsnorm.default.MISSING` there, far more than most kept ones,
so a cell that keeps few makes the table serve only what every nearby row length ranked
among its very fastest (16 against 8: docs/benchmarks.md, "The learned default,
refitted")."""
WITHIN = 0.15
"""Largest log slowdown a kept shape may have (about 1.16x)."""
GOAL = 1.10
"""A served config within this factor of the tuned winner counts as good."""

Serve = Callable[[Artifact], dict[str, Any] | None]


def measured(folder: str | Path, product: str | None) -> list[Artifact]:
    """The measured RMSNorm artifacts of ``folder`` that have a timed winner, of one
    device (``product``'s when given).

    Raises :class:`~flyconfigs.errors.FitError` naming the folder when there is none or
    when they come from several devices."""
    artifacts = [a for _, a in artifacts_of(folder, "rmsnorm", product) if a.selection.measured and a.winner.timing]
    if not artifacts:
        raise FitError(f"{folder}: no measured RMSNorm artifact" + (f" of {product!r}" if product else ""))
    devices = {(a.device.arch, a.device.product, a.device.compute_units) for a in artifacts}
    if len(devices) != 1:
        raise FitError(f"{folder}: artifacts of several devices {sorted(devices, key=str)}; fit on one tuning run")
    return artifacts


def _n(artifact: Artifact) -> int:
    """The key's row length (RMSNorm's declaration types ``N`` as an int)."""
    n = artifact.key["N"]
    assert isinstance(n, int)
    return n


def _timed(artifact: Artifact) -> list[tuple[dict[str, Any], float]]:
    return [(SPEC.complete_config(c.config), c.timing.median_us) for c in artifact.candidates if c.timing]


def _table(artifacts: Sequence[Artifact], timed: Mapping[int, list[tuple[dict[str, Any], float]]]
           ) -> rmsnorm_default.DefaultTable:
    units = artifacts[0].device.compute_units
    return rmsnorm_default.build([(a.key, timed[id(a)]) for a in artifacts], units, KEEP, WITHIN)


def _score(artifacts: Sequence[Artifact], serve: Serve) -> dict[str, Any]:
    keys = []
    for artifact in artifacts:
        # Configs are compared as canonical text: the artifact may omit tunables at
        # their defaults, which complete_config fills in on both sides.
        entries = {json.dumps(SPEC.complete_config(c.config), sort_keys=True): c for c in artifact.candidates if c.timing}
        config = serve(artifact)
        entry = entries.get(json.dumps(config, sort_keys=True)) if config is not None else None
        ratio = None
        if entry is not None and entry.timing is not None and artifact.winner.timing is not None:
            ratio = entry.timing.median_us / artifact.winner.timing.median_us
        keys.append({"key": dict(artifact.key), "config": config, "over_tuned": ratio,
                     "served_timed_in": timed_in(entry, artifact) if entry else None})
    by_stage = {stage: [k for k in keys if k["served_timed_in"] == stage] for stage in ("final", "screen")}
    return {**_summary(keys), "served_timed_in": {stage: _summary(staged) for stage, staged in by_stage.items()},
            "per_key": keys}


def _summary(keys: Sequence[dict[str, Any]]) -> dict[str, Any]:
    ratios = [k["over_tuned"] for k in keys if k["over_tuned"] is not None]
    return {
        "keys": len(keys),
        "scored": len(ratios),
        # Over every key, not only the scored ones: a key the table served nothing
        # timed for counts as a miss.
        "within_10_percent": sum(r <= GOAL for r in ratios) / len(keys) if keys else None,
        "geomean_over_tuned": math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None,
        "worst_over_tuned": max(ratios, default=None),
    }


def _held_out(artifacts: Sequence[Artifact], timed: Mapping[int, list[tuple[dict[str, Any], float]]],
              folds: Sequence[Sequence[int]]) -> Serve:
    tables = {}
    for fold in folds:
        table = _table([a for a in artifacts if _n(a) not in fold], timed)
        for n in fold:
            tables[n] = table

    def serve(artifact: Artifact) -> dict[str, Any] | None:
        wave = wave_size_of_arch(artifact.device.arch)
        key = dict(artifact.key)
        return rmsnorm_default.choose(tables[_n(artifact)], key, artifact.device.compute_units,
                                      SPEC.candidates_on(key, artifact.device, wave))

    return serve


def _rule_of_thumb(artifact: Artifact) -> dict[str, Any] | None:
    return SPEC.rule_of_thumb(dict(artifact.key), wave_size_of_arch(artifact.device.arch))


def _tuned_default(artifact: Artifact) -> dict[str, Any] | None:
    return SPEC.complete_config(artifact.default.config) if artifact.default else None


def fit(artifacts: Sequence[Artifact]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The table document fitted on ``artifacts`` (one device's, as :func:`measured`
    returns them) and the full scores with every key's row."""
    lengths = sorted({_n(a) for a in artifacts})
    # Each artifact's timed configs, completed once: every fold's table reads them again.
    timed = {id(a): _timed(a) for a in artifacts}
    scores = {
        "leave_one_n_out": _score(artifacts, _held_out(artifacts, timed, [[n] for n in lengths])),
        # Scored on the odd positions only: the even ones are what the table saw.
        "half_n_held_out": _score([a for a in artifacts if lengths.index(_n(a)) % 2],
                                  _held_out(artifacts, timed, [lengths[1::2]])),
        "rule_of_thumb": _score(artifacts, _rule_of_thumb),
        "tuned_default": _score(artifacts, _tuned_default),
    }
    device = artifacts[0].device
    document = {
        "version": 1,
        "fitted_on": {
            "device": f"{device.arch} {device.product!r} {device.compute_units} CUs",
            "artifacts": len(artifacts),
            "row_lengths": lengths,
            "keep": KEEP,
            "within": WITHIN,
        },
        "scores": {name: {k: v for k, v in s.items() if k != "per_key"} for name, s in scores.items()},
        "table": rmsnorm_default.encode(_table(artifacts, timed)),
    }
    return document, scores


def dumps(document: dict[str, Any]) -> str:
    """``document`` as the shipped file's text: sorted keys, one table cell per line (a
    refit then reads as a diff of cells), a final newline."""
    cells = document["table"]["cells"]
    head = json.dumps({**document, "table": {**document["table"], "cells": []}}, indent=1, sort_keys=True)
    lines = ",\n".join(json.dumps(cell, sort_keys=True, separators=(",", ":")) for cell in cells)
    return head.replace('"cells": []', '"cells": [\n' + lines + "\n  ]") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Fit, write ``--out`` (and ``--scores`` when given) atomically, print the scores;
    0 on success, 1 when the tunings cannot be used (the error on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m flyconfigs.kernels.rmsnorm.fit_default",
                                     description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("folder", type=Path, help="a folder of tuned artifacts (artifacts/sm90)")
    parser.add_argument("--product", help="fit on this device's tunings only (when FOLDER holds several)")
    parser.add_argument("--out", type=Path, required=True, help="the table to write (kernels/rmsnorm/default.json)")
    parser.add_argument("--scores", type=Path, help="also write every key's score to this JSON file")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder}: no such folder")  # bad input on the command line: exit 2
    try:
        document, scores = fit(measured(args.folder, args.product))
    except FlyconfigsError as exc:
        parser.exit(1, f"{parser.prog}: {exc}\n")
    write_atomic(args.out, dumps(document).encode("utf-8"))
    if args.scores:
        payload = {"fitted_on": document["fitted_on"], "scores": scores}
        write_atomic(args.scores, (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    for name, s in document["scores"].items():
        staged = ", ".join(f"{stage} {t['within_10_percent']:.1%} of {t['keys']}"
                           for stage, t in s["served_timed_in"].items() if t["keys"])
        print(f"{name}: {s['within_10_percent']:.1%} of {s['keys']} keys within 10% of tuned, "
              f"geomean {s['geomean_over_tuned']:.3f}x, worst {s['worst_over_tuned']:.2f}x "
              f"(served config timed in the {staged})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
