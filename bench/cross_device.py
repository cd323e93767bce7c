"""How well RMSNorm's cost model predicts a GPU it never measured: fit on one card's
tunings, pick a config for every key of the other card, and score the pick by its time
over the other card's tuned winner, read from the candidates that card's tuning timed.

    python -m bench.cross_device artifacts/sm90 --name cross-device-rmsnorm-sm90

The folder holds two products' tunings of the same keys (``artifacts/sm90``: the H200's
and the H100's 436 RMSNorm keys, every candidate timed on both); a key only one of them
tuned is left out of both the fits and the scores (the H100's 112 later keys), so that
each direction fits and predicts the same keys.  Each direction (fit on A, predict B, and
the reverse) is scored in three scenarios:

* ``all``: fit on every key of A, predict every key of B;
* ``N>=12288 held out`` and ``M<=16 held out``: fit on A without that region, predict the
  region on B (nothing measured there on either card).

Beside the model, on the same keys: the family default the tuning of B measured, and
borrowing: B served A's winner of the same key (``all``) or, in a held-out region, A's
winner of the nearest key left in (the registry's nearest-key rule: the smallest sum of
``|log2|`` distances over M and N, a tie to the larger key).  A config B's tuning never
timed is listed under ``untimed`` with its key (``bench/cross_device_gpu.py`` times those,
and the screen-timed ones, with the final protocol); each figure says how many of its
times came from the tuner's final protocol and how many from its shorter screen.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import write_result
from flyconfigs.kernels.measured import artifacts_of, timed_in
from flyconfigs.kernels.rmsnorm import SPEC, fit_default, fit_model, ridge
from flyconfigs.kernels.rmsnorm import default as learned_default
from flyconfigs.kernels.rmsnorm.model import RMSNormCostModel
from flyconfigs.kernels.rmsnorm.ridge import KeyRows
from flyconfigs.registry.core.products import find_product
from flyconfigs.schema import Artifact
from flyconfigs.schema.canonical import canonical_text

__all__ = ["METHODS", "RIDGE_LAMBDA", "SCENARIOS", "both_tuned", "cross_check", "main", "summarize"]

RIDGE_LAMBDA = 100.0
"""The ridge strength version 1 shipped with."""

Region = Callable[[dict[str, Any]], bool]
SCENARIOS: dict[str, Region | None] = {
    "all": None,
    "N>=12288 held out": lambda key: int(key["N"]) >= 12288,
    "M<=16 held out": lambda key: int(key["M"]) <= 16,
}
"""Each scenario's held-out region (``None``: nothing held out, every key predicted)."""


def _text(config: Any) -> str:
    return canonical_text(dict(config))


def _time_on(artifact: Artifact, config: Any) -> tuple[float | None, str | None]:
    """``config``'s recorded time over ``artifact``'s winner and the protocol that timed it
    (``None, None`` when the tuning did not time it)."""
    wanted = _text(config)
    winner = artifact.winner.timing
    assert winner is not None
    for c in artifact.candidates:
        if c.timing and _text(c.config) == wanted:
            return c.timing.median_us / winner.median_us, timed_in(c, artifact)
    return None, None


def _nearest(key: dict[str, Any], pool: Sequence[Artifact]) -> Artifact | None:
    """The artifact of ``pool`` the registry's nearest-key rule would serve for ``key``."""
    same = [a for a in pool if a.key["dtype"] == key["dtype"] and a.key["weight_dtype"] == key["weight_dtype"]]
    if not same:
        return None

    def distance(a: Artifact) -> tuple[float, float, float]:
        d = sum(abs(math.log2(int(a.key[x])) - math.log2(int(key[x]))) for x in ("M", "N"))
        return d, -float(a.key["M"]), -float(a.key["N"])

    return min(same, key=distance)


def _score(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    timed = [r for r in rows if r[method]["ratio"] is not None]
    ratios = [r[method]["ratio"] for r in timed]
    out: dict[str, Any] = {"keys": len(rows), "timed": len(timed),
                           "from_final": sum(r[method]["timed_in"] == "final" for r in timed),
                           "from_screen": sum(r[method]["timed_in"] == "screen" for r in timed),
                           "untimed": [r["key"] for r in rows if r[method]["ratio"] is None]}
    if ratios:
        worst = max(timed, key=lambda r: r[method]["ratio"])
        out.update({"within_3pct": sum(x <= 1.03 for x in ratios), "within_10pct": sum(x <= 1.10 for x in ratios),
                    "geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)),
                    "worst": worst[method]["ratio"], "worst_key": worst["key"]})
    return out


METHODS = ("predicted", "ridge", "default", "default_refit", "borrowed")
"""``predicted``: the cost model fitted on the other card; ``ridge``: its version 1 refitted
the same way; ``default``: the family default the tuning measured (fitted on the H200's
tunings, so it has seen every key of the H200 and of the held-out regions);
``default_refit``: the learned default's table refitted on the other card alone, outside
the held-out region; ``borrowed``: see the module docstring."""


def cross_check(source: Sequence[KeyRows], target: Sequence[KeyRows], region: Region | None
                ) -> tuple[list[dict[str, Any]], float]:
    """Per key of ``target`` (in ``region``, or every key): each of :data:`METHODS`'s
    configs, fitted on ``source`` outside ``region``, with its time over the target's
    winner; and the roofline weight the model's fit chose."""
    train = [r for r in source if region is None or not region(dict(r.artifact.key))]
    artifacts = [r.artifact for r in train]
    document = fit_model.fit_artifacts(artifacts)
    model, table = RMSNormCostModel(document), learned_default.decode(document["table"])
    weights = ridge.solve(train, RIDGE_LAMBDA)
    refit = fit_default._table(artifacts, {id(a): fit_default._timed(a) for a in artifacts})
    by_key = {_text(r.artifact.key): r.artifact for r in train}
    out = []
    for rows in target:
        artifact, key = rows.artifact, dict(rows.artifact.key)
        if region is not None and not region(key):
            continue
        device = rows.device
        lender = by_key.get(_text(key)) if region is None else _nearest(key, artifacts)
        configs = {
            "predicted": fit_model.pick(model, artifact, device, table).config,
            "ridge": ridge.pick(weights, rows).config,
            "default": artifact.default.config if artifact.default else None,
            "default_refit": learned_default.choose(refit, key, device.compute_units,
                                                    [SPEC.complete_config(c.config) for c in rows.candidates]),
            "borrowed": lender.winner.config if lender else None,
        }
        row: dict[str, Any] = {"key": key, "winner": dict(artifact.winner.config)}
        for method, config in configs.items():
            ratio, stage = _time_on(artifact, config) if config is not None else (None, None)
            row[method] = {"ratio": ratio, "timed_in": stage}
            if method in ("predicted", "borrowed") or ratio is None:  # the rest are in the tunings
                row[method]["config"] = dict(config) if config is not None else None
        if region is not None and lender is not None:
            row["borrowed"]["from_key"] = dict(lender.key)
        out.append(row)
    return out, float(document["roofline_weight"])


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of each method over ``rows``."""
    return {m: _score(rows, m) for m in METHODS}


def _rows(folder: Path, product: str) -> list[KeyRows]:
    """``product``'s usable tunings, their features on the catalog's descriptor of it (what
    ``flyconfigs predict`` sees of a device it has never measured)."""
    found = find_product(product)
    device = found.device if found is not None else None
    return [ridge.key_rows(a, device) for _, a in artifacts_of(folder, "rmsnorm", product) if fit_model.usable(a)]


def both_tuned(rows: dict[str, list[KeyRows]]) -> tuple[dict[str, list[KeyRows]], dict[str, int]]:
    """Each product's rows of the keys every product tuned, and how many of each product's
    keys that leaves out."""
    keys = {p: {_text(r.artifact.key) for r in rs} for p, rs in rows.items()}
    common = set.intersection(*keys.values())
    return ({p: [r for r in rs if _text(r.artifact.key) in common] for p, rs in rows.items()},
            {p: len(k - common) for p, k in keys.items()})


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="two products' tunings of the same RMSNorm keys")
    parser.add_argument("--name", required=True, help="bench/results/NAME.json")
    parser.add_argument("--out", type=Path, help="folder for the result (default bench/results)")
    parser.add_argument("--products", nargs=2, default=["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
    args = parser.parse_args(argv)
    rows = {p: _rows(args.folder, p) for p in args.products}
    rows, left_out = both_tuned(rows)
    results: list[dict[str, Any]] = []
    for scenario, region in SCENARIOS.items():
        for source, target in (args.products, args.products[::-1]):
            per_key, weight = cross_check(rows[source], rows[target], region)
            summary = summarize(per_key)
            results.append({"scenario": scenario, "fitted_on": source, "predicted_for": target,
                            "roofline_weight": weight, "summary": summary, "per_key": per_key})
            for method, s in summary.items():
                print(f"{scenario:>18} {source[:11]:>11} -> {target[:11]:<11} {method:>9}: "
                      f"{s.get('within_3pct')}/{s['timed']} within 3%, {s.get('within_10pct')} within 10%, "
                      f"geomean {s.get('geomean', 0):.4f}x, worst {s.get('worst', 0):.3f}x {s.get('worst_key')} "
                      f"(final {s['from_final']}, screen {s['from_screen']}, untimed {len(s['untimed'])})", flush=True)
    path = write_result(args.name, {"folder": str(args.folder), "products": args.products,
                                    "keys_both_tuned": len(next(iter(rows.values()))), "left_out": left_out,
                                    "model": {"name": fit_model.NAME, "ridge": "flyconfigs.kernels.rmsnorm.ridge"},
                                    "results": results}, args.out)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
