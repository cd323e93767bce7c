"""Fits RMSNorm's cost model (:mod:`flyconfigs.kernels.rmsnorm.model`) on one device's
measured tunings and writes its table (``model.json``) with where it came from.

    python -m flyconfigs.kernels.rmsnorm.fit_model artifacts/sm90 --product "NVIDIA H200" --out kernels/rmsnorm/model.json

FOLDER holds the tunings to fit on (a folder that holds several devices' tunings needs
``--product``).  The table keeps, for every measured key, each timed and spill-free
shape's log slowdown against the key's tuned winner, up to
:data:`~flyconfigs.kernels.rmsnorm.model.MISSING`:

* the winner is 0, and every other finalist at least :data:`LOSER_FLOOR`: the tuner's
  final kept the winner because no other config beat it beyond the noise, so a tie in
  the table goes to the config the measurement chose;
* a candidate timed only in the tuner's screen is at least :data:`SCREEN_MARGIN` slower
  than the slowest finalist: the screen sent the fastest to the final, and a screen time
  is a shorter measurement that can read lower than a final one.

The figures are leave-one-row-length-out: each row length is held out in turn, the
table of the others picks a config for each held-out key from its timed candidates, and
the pick's time is compared with the tuned winner (``picks_timed_in_final`` says how many
of those times come from the final protocol).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flyconfigs.errors import FitError, FlyconfigsError
from flyconfigs.kernels.measured import artifacts_of, timed_in
from flyconfigs.kernels.rmsnorm.default import DefaultTable, Shape, encode, shape_of
from flyconfigs.kernels.rmsnorm.model import MISSING, OWN_WEIGHT, ROOFLINE, SIGMA, RMSNormCostModel
from flyconfigs.schema import Artifact, Candidate, write_atomic
from flyconfigs.schema.models import Device

__all__ = ["LOSER_FLOOR", "NAME", "ROOFLINE_WEIGHTS", "SCREEN_MARGIN", "cell_of", "dumps", "fit", "fit_artifacts", "main", "pick",
           "refit_document", "table_of", "timed", "usable"]

NAME = "rmsnorm-neighbours"
"""The model's name as predicted artifacts record it."""
LOSER_FLOOR = 0.002
"""The least log slowdown of a finalist that is not the winner."""
SCREEN_MARGIN = 0.005
"""How much slower than the slowest finalist a screen-only candidate counts, at least."""
ROOFLINE_WEIGHTS = (0.001, 0.03, 0.1, 0.2, 0.4)
"""The roofline weights cross-validation chooses from: the most held-out picks within 3%
of their winners, the smaller geometric mean breaking ties."""

Cell = tuple[tuple[str, str, int, int], dict[Shape, float]]


def timed(artifact: Artifact) -> list[Candidate]:
    """``artifact``'s timed candidates that a prediction may serve: a spilling candidate is
    never served by a prediction (predict skips it), so it must not teach the model either."""
    return [c for c in artifact.candidates if c.timing and c.resources and not c.resources.spill_bytes]


def usable(artifact: Artifact) -> bool:
    """Whether ``artifact`` can teach the model: measured, its winner timed, and at least
    one servable timed candidate."""
    return bool(artifact.selection.measured and artifact.winner.timing and timed(artifact))


def cell_of(artifact: Artifact) -> Cell:
    """``artifact``'s key and its shapes' log slowdowns as the table keeps them (see the
    module docstring)."""
    winner = artifact.winner.timing
    assert winner is not None  # usable() keeps artifacts with a timed winner only
    n, dtype = _n(artifact), str(artifact.key["dtype"])
    won = dict(artifact.winner.config)
    finals = [c for c in timed(artifact) if timed_in(c, artifact) == "final"]
    slowest = max((_slowdown(c, winner.median_us) for c in finals), default=0.0)
    cell: dict[Shape, float] = {}
    for c in timed(artifact):
        slow = _slowdown(c, winner.median_us)
        if dict(c.config) == won:
            slow = 0.0
        elif timed_in(c, artifact) == "final":
            slow = max(slow, LOSER_FLOOR)
        else:
            slow = max(slow, max(slowest, LOSER_FLOOR) + SCREEN_MARGIN)
        if slow <= MISSING:
            shape = shape_of(c.config, n, dtype)
            cell[shape] = min(cell.get(shape, MISSING), round(slow, 4))
    m = artifact.key["M"]
    assert isinstance(m, int)  # RMSNorm's declaration types M as an int
    return (dtype, str(artifact.key["weight_dtype"]), m, n), cell


def _n(artifact: Artifact) -> int:
    n = artifact.key["N"]
    assert isinstance(n, int)  # RMSNorm's declaration types N as an int
    return n


def _slowdown(candidate: Candidate, winner_us: float) -> float:
    assert candidate.timing is not None  # timed() keeps timed candidates only
    return math.log(candidate.timing.median_us / winner_us)


def table_of(cells: Sequence[Cell], compute_units: int) -> DefaultTable:
    """The table of ``cells`` measured on a device of ``compute_units``."""
    return DefaultTable(compute_units, dict(cells))


def pick(model: RMSNormCostModel, artifact: Artifact, device: Device | None = None,
         table: DefaultTable | None = None) -> Candidate:
    """The timed, spill-free candidate of ``artifact`` that ``model`` (with ``table`` as
    its reference, when given) ranks first on ``device`` (the artifact's own by default: a
    prediction for a product passes the catalog's descriptor of it)."""
    candidates = timed(artifact)
    scores = model.scores([c.config for c in candidates], artifact.key, device or artifact.device,
                          [c.resources for c in candidates],  # type: ignore[misc]
                          [(table, 1.0)] if table is not None else None)
    return candidates[scores.index(min(scores))]


def _figures(picks: Sequence[tuple[float, str]]) -> dict[str, float]:
    ratios = [r for r, _ in picks]
    return {"keys": len(ratios), "within_3pct_of_tuned": sum(r <= 1.03 for r in ratios) / len(ratios),
            "within_10pct_of_tuned": sum(r <= 1.10 for r in ratios) / len(ratios),
            "geomean_slowdown_vs_tuned": math.exp(sum(map(math.log, ratios)) / len(ratios)),
            "worst_slowdown_vs_tuned": max(ratios),
            "picks_timed_in_final": sum(stage == "final" for _, stage in picks) / len(ratios)}


def fit(folder: str | Path, product: str | None = None, version: int = 2) -> dict[str, Any]:
    """The model document fitted on ``folder``'s measured RMSNorm tunings (``product``'s
    when given).

    Raises :class:`~flyconfigs.errors.FitError` naming the folder when it holds no
    measured RMSNorm artifact or several devices' without ``product``."""
    found = [(p, a) for p, a in artifacts_of(folder, "rmsnorm", product) if usable(a)]
    if not found:
        raise FitError(f"{folder}: no measured RMSNorm artifact" + (f" of {product!r}" if product else ""))
    # Each artifact by its own file name (a packed row by the name it had as a file).
    return fit_artifacts([a for _, a in found], [a.file_name() for _, a in found], version)


def fit_artifacts(artifacts: Sequence[Artifact], files: Sequence[str] = (), version: int = 2) -> dict[str, Any]:
    """The model document fitted on ``artifacts`` (one device's measured keys, read from
    ``files``): the table of every key, and the roofline weight that leave-one-row-length-out
    cross-validation on them chooses, with each weight's figures."""
    cells = [cell_of(a) for a in artifacts]
    units = artifacts[0].device.compute_units
    figures = _cross_validate(artifacts, cells, units)
    chosen = max(ROOFLINE_WEIGHTS, key=lambda w: (figures[str(w)]["within_3pct_of_tuned"],
                                                  -figures[str(w)]["geomean_slowdown_vs_tuned"]))
    return {
        "model": NAME,
        "version": version,
        "sigma": SIGMA,
        "missing": MISSING,
        "roofline_weight": chosen,
        "loser_floor": LOSER_FLOOR,
        "screen_margin": SCREEN_MARGIN,
        "fitted_on": {"device": artifacts[0].device.identity.describe(), "keys": len(artifacts),
                      "row_lengths": sorted({_n(a) for a in artifacts}), "files": list(files)},
        "leave_one_row_length_out": figures,
        "table": encode(table_of(cells, units)),
    }


def _cross_validate(artifacts: Sequence[Artifact], cells: Sequence[Cell], units: int) -> dict[str, dict[str, float]]:
    """Each roofline weight's figures when every row length is held out in turn and the
    table of the others picks a config for each of its keys."""
    shapes_only = RMSNormCostModel({})  # prescores reads only the tables it is given
    picks: dict[float, list[tuple[float, str]]] = {w: [] for w in ROOFLINE_WEIGHTS}
    for held in sorted({_n(a) for a in artifacts}):
        table = [(table_of([c for c in cells if c[0][3] != held], units), 1.0)]
        for a in artifacts:
            if _n(a) != held:
                continue
            candidates = timed(a)
            winner = a.winner.timing
            assert winner is not None
            prescores = shapes_only.prescores([c.config for c in candidates], a.key, a.device, table)
            roofline = [math.log(ROOFLINE.predict_us(c.config, a.key, a.device, c.resources))  # type: ignore[arg-type]
                        for c in candidates]
            for w in ROOFLINE_WEIGHTS:
                scores = [p + w * r for p, r in zip(prescores, roofline, strict=True)]
                chosen = candidates[scores.index(min(scores))]
                picks[w].append((math.exp(_slowdown(chosen, winner.median_us)), timed_in(chosen, a)))
    return {str(w): _figures(p) for w, p in picks.items()}


_FLAT_LIST = re.compile(r"\[\n([^\[\]{}]*?)\n *\]")
"""A list of scalars as ``json.dumps(indent=1)`` writes it: one element a line."""


def refit_document(document: Mapping[str, Any], artifacts: Sequence[Artifact], files: Sequence[str] = ()
                   ) -> dict[str, Any]:
    """``document`` (a fitted model) with ``artifacts``, one device's measured tunings, as
    that device's own keys (``refit``; they weigh
    :data:`~flyconfigs.kernels.rmsnorm.model.OWN_WEIGHT` times the reference's), named
    ``<model>-refit``.  Raises :class:`~flyconfigs.errors.FitError` when none is usable or
    they are several devices'."""
    kept = [a for a in artifacts if a.kernel.name == "rmsnorm" and usable(a)]
    if not kept:
        raise FitError("no measured RMSNorm tuning to refit on")
    devices = {a.device.identity.describe() for a in kept}
    if len(devices) > 1:
        raise FitError(f"tunings of several devices ({', '.join(sorted(devices))}): refit on one device's")
    base = str(document["model"]).removesuffix("-refit")
    return {**document, "model": f"{base}-refit",
            "refit": {"device": devices.pop(), "keys": len(kept), "own_weight": OWN_WEIGHT, "files": list(files),
                      "table": encode(table_of([cell_of(a) for a in kept], kept[0].device.compute_units))}}


def dumps(document: dict[str, Any]) -> str:
    """``document`` as the shipped file's text: sorted keys, indent 1, a list of scalars
    (a shape and its slowdown) on one line, a final newline."""
    text = json.dumps(document, indent=1, sort_keys=True)
    return _FLAT_LIST.sub(lambda m: "[" + " ".join(line.strip() for line in m.group(1).split("\n")) + "]", text) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Fit, write ``--out`` atomically and print the cross-validation; 0 on success, 1
    when the tunings cannot be used (the error on stderr)."""
    parser = argparse.ArgumentParser(prog="python -m flyconfigs.kernels.rmsnorm.fit_model",
                                     description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("folder", type=Path, help="a folder holding the tunings to fit on, and nothing else")
    parser.add_argument("--out", type=Path, required=True, help="the table to write (kernels/rmsnorm/model.json)")
    parser.add_argument("--version", type=int, default=2, help="the model version the table is recorded as")
    parser.add_argument("--product", help="fit on this device's tunings only (when FOLDER holds several)")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder}: no such folder")  # bad input on the command line: exit 2
    try:
        document = fit(args.folder, args.product, args.version)
    except FlyconfigsError as exc:
        parser.exit(1, f"{parser.prog}: {exc}\n")
    write_atomic(args.out, dumps(document).encode("utf-8"))
    print(f"leave-one-N-out {document['leave_one_row_length_out']} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
