"""The leave-one-out's picks re-timed on this GPU, like with like.

``bench/neighbour_vote.py`` scores each rule's config for a hidden key by the times that
key's own tuning recorded.  Those mix two protocols: the screen (a few samples of a short
replay, every candidate) and the final (the winner, the default and a few more, the full
protocol), and on some keys the screen reads 10-20% below every final, so even the key's
own winner scores above 1 there.  This benchmark takes that result file's rows of this
GPU's product (one kernel, one way of hiding), a seeded sample of the hidden keys, and
times at each key every distinct config the row names (the key's own tuned winner, the
refitted default and each rule's config) in one interleaved measurement with the tuner's
final protocol, each checked against the reference first.

``--repeats K`` measures each key K times, one interleaved measurement after another, and
scores each config by the median of its K medians (a row keeps every measurement under
``us_runs``); the summary then says how far the key's own winner moved between them.

Per rule: the geomean of its time over the fastest of the key's set and over the tuned
winner, the keys where it is more than 3% slower than the default, and the worst.  Writes
``--out`` after every key; ``--resume`` keeps the keys a file already holds (a machine
taken back mid-run loses one key, not the run).  Exits 3 when ``--budget-s`` stopped it
before every key of the sample was timed (run it again with ``--resume``), else 0.

    python -m bench.neighbour_vote --out bench/results/neighbour-vote-loo.json
    python -m bench.loo_remeasure --loo bench/results/neighbour-vote-loo.json --kernel rmsnorm --mode n \\
        --keys 120 --out FILE
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import machine
from bench.loo_scores import WORSE, geomean
from flyconfigs.registry.plugin import config_token

__all__ = ["RULES", "WORSE", "combined", "main", "names_of", "picks", "resumed", "sample", "summary"]

RULES = ("winner", "default", "nearest", "vote", "paired", "paired-se", "sibling")
"""The row's entries re-timed: the key's own tuned winner, then each rule's config."""


def sample(rows: Sequence[Mapping[str, Any]], keys: int, seed: int) -> list[Mapping[str, Any]]:
    """``keys`` of ``rows`` (all where ``keys`` is 0 or more than there are), drawn with
    ``seed``, in the order drawn: a run stopped by its budget has timed a random sample
    too."""
    chosen = random.Random(seed).sample(range(len(rows)), min(keys or len(rows), len(rows)))
    return [rows[i] for i in chosen]


def picks(row: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
          ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The distinct configs ``row`` names (the winner first, then the default; one config
    once, whether or not it spells out a tunable at its value in ``defaults``, the
    family's ``tunable_defaults``) and, per rule present, the index of its config among
    them; a rule whose config the key's tuning never timed is left out (the tuner's space
    at the key did not hold it, so it may not run there)."""
    configs: list[dict[str, Any]] = []
    slots: list[Any] = []
    index: dict[str, int] = {}
    for rule in RULES:
        entry = row.get(rule)
        if not entry or entry.get("ratio") is None:
            continue
        config = dict(entry["config"])
        slot = config_token(config, defaults or {})
        if slot not in slots:
            configs.append(config)
            slots.append(slot)
        index[rule] = slots.index(slot)
    return configs, index


def names_of(index: Mapping[str, int], count: int) -> list[str]:
    """For each of ``count`` configs, the first rule (in :data:`RULES` order) that served
    it: what an error names it by."""
    return [next(rule for rule, i in index.items() if i == n) for n in range(count)]


def combined(runs: Sequence[Sequence[float]]) -> list[float]:
    """Each config's time over several measurements of one key (``runs[k][i]``: config
    ``i`` in measurement ``k``): the median of its medians (of two, their mean)."""
    if not runs or any(len(r) != len(runs[0]) for r in runs):
        raise ValueError("every measurement of a key times the same configs")
    return [statistics.median(r[i] for r in runs) for i in range(len(runs[0]))]


def spread(timed: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """How far the key's own winner moved between the measurements of one key (rows
    measured more than once): the median and the largest of its slowest over its fastest
    time, and the keys where that is more than 3%; ``None`` where no row was measured
    twice."""
    moved = [max(r["us_runs"]["winner"]) / min(r["us_runs"]["winner"]) for r in timed
             if len(r.get("us_runs", {}).get("winner", ())) > 1]
    if not moved:
        return None
    return {"keys": len(moved), "median": round(statistics.median(moved), 4), "largest": round(max(moved), 3),
            "over_3_percent": sum(1 for m in moved if m > WORSE)}


def summary(timed: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per rule over the ``timed`` rows that timed it, the winner and the default (each
    with ``us``: µs per rule, of one measurement or combined over several):
    the geomean of its time over the fastest of the row's set and over the tuned winner,
    keys more than 3% slower than the default, the worst over the fastest, and the key;
    under ``winner_moved``, :func:`spread` where rows were measured more than once."""
    out: dict[str, Any] = {}
    for rule in RULES:
        held = [r for r in timed if rule in r["us"] and "winner" in r["us"] and "default" in r["us"]]
        if not held:
            continue
        best = [r["us"][rule] / min(r["us"].values()) for r in held]
        winner = [r["us"][rule] / r["us"]["winner"] for r in held]
        worst = max(range(len(held)), key=lambda i: best[i])
        out[rule] = {
            "keys": len(held),
            "geomean_over_fastest": round(geomean(best), 4),
            "geomean_over_winner": round(geomean(winner), 4),
            "worse_than_default": sum(1 for r in held if r["us"][rule] > WORSE * r["us"]["default"]),
            "worst": round(best[worst], 3),
            "worst_key": held[worst]["key"],
        }
    moved = spread(timed)
    if moved is not None:
        out["winner_moved"] = moved
    return out


def resumed(out: Path, loo: Mapping[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rows ``out`` already holds (none where it does not exist); SystemExit where it
    was written for another kernel, way of hiding, seed or leave-one-out run."""
    if not out.exists():
        return []
    before = json.loads(out.read_text())
    asked = {"kernel": args.kernel, "mode": args.mode, "seed": args.seed, "loo_revision": loo.get("revision"),
             "repeats": getattr(args, "repeats", 1)}
    held = {k: before.get(k, 1 if k == "repeats" else None) for k in asked}  # a file of before --repeats: 1
    if held != asked:
        raise SystemExit(f"{out}: written for {held}, not {asked}: "
                         "--resume goes on with the same run only")
    rows: list[dict[str, Any]] = before["rows"]
    return rows


def _write(path: Path, payload: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loo", type=Path, required=True, help="bench/neighbour_vote.py's result file")
    parser.add_argument("--kernel", default="rmsnorm", choices=("rmsnorm", "fused_add_rmsnorm"))
    parser.add_argument("--mode", default="n", choices=("key", "n", "m"))
    parser.add_argument("--keys", type=int, default=0, help="a sample of this many hidden keys (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=1, help="measure each key this many times (default 1)")
    parser.add_argument("--budget-s", type=float, default=0.0, help="stop starting keys after this many seconds")
    parser.add_argument("--resume", action="store_true", help="keep the keys --out already holds")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats: at least 1")
    loo = json.loads(args.loo.read_text())
    if args.resume:
        resumed(args.out, loo, args)  # refused before a GPU is asked for
    import torch

    from bench.off_grid import time_configs
    from flyconfigs.gpu import get_backend
    from flyconfigs.kernels.plugin import tunable_kernel
    from flyconfigs.registry import DeviceQuery

    backend = get_backend()
    device = backend.device()
    query = DeviceQuery.of(device.identity)
    decl = tunable_kernel(args.kernel)
    rows = loo["rows"][args.kernel].get(device.product)
    if not rows:
        raise SystemExit(f"{args.loo}: no {args.kernel} rows of {device.product}")
    chosen = sample(rows[args.mode], args.keys, args.seed)
    done = resumed(args.out, loo, args) if args.resume else []
    seen = {json.dumps(r["key"], sort_keys=True) for r in done}
    started = time.time()
    stopped = False
    for row in chosen:
        if json.dumps(row["key"], sort_keys=True) in seen:
            continue
        if args.budget_s and time.time() - started > args.budget_s:
            stopped = True
            break
        configs, index = picks(row, decl.tunable_defaults)
        key = decl.check_key(dict(row["key"]))
        runs = [time_configs(decl, key, configs, backend, query, args.samples, names_of(index, len(configs)))
                for _ in range(args.repeats)]
        medians = combined(runs)
        done.append({"key": row["key"], "configs": configs,
                     "us": {rule: medians[i] for rule, i in index.items()},
                     **({"us_runs": {rule: [r[i] for r in runs] for rule, i in index.items()}}
                        if args.repeats > 1 else {}),
                     "recorded": {rule: row[rule]["ratio"] for rule in index}})
        print(f"{row['key']}: " + " ".join(f"{r} {medians[i]:.2f}" for r, i in index.items()), flush=True)
        _write(args.out, {"benchmark": "loo-remeasure", "kernel": args.kernel, "mode": args.mode, "keys": args.keys,
                          "seed": args.seed, "repeats": args.repeats, "of": len(rows[args.mode]), "loo": str(args.loo),
                          "loo_revision": loo.get("revision"), "machine": machine(), "torch": torch.__version__,
                          "device": device.model_dump(mode="json"),
                          "protocol": "the tuner's final timing (rotated inputs, graph replay, held replays), "
                                      "every config of a key interleaved; medians"
                                      + (f", the median of {args.repeats} such measurements" if args.repeats > 1
                                         else ""),
                          "summary": summary(done), "rows": done})
    print(json.dumps(summary(done), indent=1))
    if stopped:
        print(f"stopped by --budget-s after {len(done)} of {len(chosen)} keys: run again with --resume", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
