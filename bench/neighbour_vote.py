"""Leave-one-out of the nearest-key rules over a folder of measured artifacts, through the
resolver: for every tuned key, the key is hidden (the other artifacts of its device and
kernel are what a ``FLYCONFIGS_PATH`` folder holds, without it), resolved as a user's
process would resolve it, and the served config is looked up in the hidden key's own
recorded candidates, as its time over the best time recorded there.

The rules, each the real resolver's answer for the hidden key:

- ``nearest``: the family's declaration with its neighbourhood rule switched off (the
  nearer key's winner, adapted where it must be);
- ``default``: what the family serves with no artifact (its default heuristic);
- ``vote``: the neighbourhood vote of :mod:`flyconfigs.kernels.neighbour_vote` with the
  family's default among its candidates;
- ``vote_without_default``: the same vote over the configs the neighbours recorded only,
  the rule RMSNorm ships (RMSNorm's learned default was fitted on the committed
  tunings, so at a tuned key it is not held out, and asking for it costs a search of its
  space on every resolve).

Per kernel and device: the geometric mean of time over best, the fraction within 3%, the
worst key, over the keys where the rule's config was timed at the hidden key, and the
same over the keys where every rule's was (``common``); keys served anything but a nearer
key (no neighbour of the same dtypes) are counted and left out.  No GPU is used: every
figure comes from the recorded timings.

    python -m bench.neighbour_vote --out bench/results/neighbour-vote-loo.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bench.common import machine
from flyconfigs.kernels.fused_add_rmsnorm import SPEC as FUSED
from flyconfigs.kernels.neighbour_vote import NeighbourVote, VotesAmongNeighbours
from flyconfigs.kernels.rmsnorm import SPEC as RMSNORM
from flyconfigs.registry import DeviceQuery, KernelDecl, Resolver
from flyconfigs.schema import Artifact
from flyconfigs.schema.pack import folder_artifacts

ROOT = Path(__file__).resolve().parents[1]
WITHIN = 1.03
RULES = ("nearest", "default", "vote", "vote_without_default")


def rules_of(spec: KernelDecl) -> dict[str, KernelDecl]:
    """The declarations whose answers are compared: ``spec`` without its neighbourhood
    rule, and with the vote (its own where it ships one)."""
    base = type(spec)

    def off(self: Any, asked: Any, neighbours: Any, device: Any) -> None:
        return None

    nearest = type(f"{base.__name__}Nearest", (base,), {"choose_from_neighbours": off})()
    voting = base if isinstance(spec, VotesAmongNeighbours) else type(
        f"{base.__name__}Vote", (base, VotesAmongNeighbours), {})
    vote = type(f"{base.__name__}VoteWithDefault", (voting,), {"neighbour_vote": NeighbourVote(with_default=True)})()
    recorded = type(f"{base.__name__}VoteRecorded", (voting,), {"neighbour_vote": NeighbourVote(with_default=False)})()
    return {"nearest": nearest, "default": spec, "vote": vote, "vote_without_default": recorded}


def _slot(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[tuple[str, type, Any], ...]:
    return tuple(sorted((k, type(v), v) for k, v in {**defaults, **config}.items()))


def _timings(artifact: Artifact, defaults: Mapping[str, Any]) -> dict[tuple[tuple[str, type, Any], ...], float]:
    return {_slot(c.config, defaults): c.timing.median_us for c in artifact.candidates
            if c.status == "ok" and c.timing is not None}


def measured(folder: Path, kernel: str) -> dict[str, list[tuple[Path, Artifact]]]:
    """The measured artifacts of ``kernel`` in ``folder``, by device product."""
    out: dict[str, list[tuple[Path, Artifact]]] = defaultdict(list)
    # A pack's rows (or single files) each as the file the tuner would have written.
    for artifact in folder_artifacts(folder, kernel):
        if artifact.selection.rule != "predicted":
            out[artifact.device.identity.product or "unknown"].append((Path(artifact.file_name()), artifact))
    return dict(out)


def leave_one_out(spec: KernelDecl, files: list[tuple[Path, Artifact]], work: Path, limit: int = 0,
                  progress: bool = False) -> list[dict[str, Any]]:
    """One row per hidden key (the first ``limit`` only, where given): its key, and per
    rule the served config's time over the best recorded at the key (``None`` where the
    key never timed it) and where it came from."""
    rules = rules_of(spec)
    defaults = dict(spec.tunable_defaults)
    pool, hidden, empty = work / "pool", work / "hidden", work / "empty"
    for folder in (pool, hidden, empty):
        folder.mkdir(parents=True)
    for path, artifact in files:
        (pool / path.name).write_bytes(artifact.to_json_bytes())
    rows = []
    for i, (path, artifact) in enumerate(files[:limit] if limit else files):
        os.replace(pool / path.name, hidden / path.name)
        try:
            rows.append(_row(spec, rules, defaults, artifact, pool, empty))
        finally:
            os.replace(hidden / path.name, pool / path.name)
        if progress and (i + 1) % 50 == 0:
            print(f"  {i + 1}/{len(files)}", flush=True)
    return rows


def _row(spec: KernelDecl, rules: Mapping[str, KernelDecl], defaults: Mapping[str, Any], artifact: Artifact,
         pool: Path, empty: Path) -> dict[str, Any]:
    query = DeviceQuery.of(artifact.device.identity)
    key = dict(artifact.key)
    times = _timings(artifact, defaults)
    best = min(times.values())
    row: dict[str, Any] = {"key": key}
    resolver = Resolver([str(pool)], detector=None, packages=False)
    for name, decl in rules.items():
        served = (Resolver([str(empty)], detector=None, packages=False) if name == "default" else resolver).resolve(
            decl, key, query)
        found = times.get(_slot(served.config, defaults))
        row[name] = {"ratio": None if found is None else found / best, "key_match": served.key_match,
                     "matched_key": None if served.matched_key is None else dict(served.matched_key),
                     "from": None if served.neighbourhood is None else _origin(served.neighbourhood.winner_at,
                                                                              served.neighbourhood.default)}
    return row


def _origin(winner_at: Iterable[Mapping[str, Any]], default: bool) -> str:
    keys = [f"{k.get('M')}x{k.get('N')}" for k in winner_at]
    return ", ".join([*(f"winner at {k}" for k in keys), *(["default"] if default else [])]) or "a recorded config"


def figures(ratios: list[float]) -> dict[str, Any]:
    """Geometric mean, fraction within 3% and worst of ``ratios``."""
    if not ratios:
        return {"n": 0}
    return {"n": len(ratios), "geomean": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 4),
            "within_3pct": round(sum(r <= WITHIN for r in ratios) / len(ratios), 3), "worst": round(max(ratios), 3)}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per rule over the keys its config was timed at, and ``common`` over the keys all
    rules were; keys not served a nearer key are counted in ``not_nearest``."""
    used = [r for r in rows if r["nearest"]["key_match"] == "nearest"]
    out: dict[str, Any] = {"keys": len(rows), "not_nearest": len(rows) - len(used)}
    for rule in RULES:
        timed = [r[rule]["ratio"] for r in used if r[rule]["ratio"] is not None]
        out[rule] = {**figures(timed), "untimed": len(used) - len(timed)}
    common = [r for r in used if all(r[rule]["ratio"] is not None for rule in RULES)]
    out["common"] = {rule: figures([r[rule]["ratio"] for r in common]) for rule in RULES}
    out["vote_changed"] = sum(r["vote"]["ratio"] != r["nearest"]["ratio"] for r in common)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", type=Path, default=ROOT / "artifacts" / "sm90")
    parser.add_argument("--kernel", action="append", choices=("rmsnorm", "fused_add_rmsnorm"),
                        help="kernels to measure (default both)")
    parser.add_argument("--limit", type=int, default=0, help="hide only the first N keys of each device (a quick check)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    specs = {"rmsnorm": RMSNORM, "fused_add_rmsnorm": FUSED}
    results: dict[str, Any] = {}
    rows_out: dict[str, Any] = {}
    started = time.perf_counter()
    for kernel in args.kernel or list(specs):
        for product, files in sorted(measured(args.artifacts, kernel).items()):
            print(f"{kernel} on {product}: {len(files)} keys", flush=True)
            with tempfile.TemporaryDirectory() as work:
                rows = leave_one_out(specs[kernel], files, Path(work), args.limit, progress=True)
            results.setdefault(kernel, {})[product] = summary(rows)
            rows_out.setdefault(kernel, {})[product] = rows
            print(json.dumps(results[kernel][product]), flush=True)
    payload = {
        "benchmark": "neighbour-vote-loo", "machine": machine(), "revision": _revision(),
        "command": "python -m bench.neighbour_vote " + " ".join(argv if argv is not None else sys.argv[1:]),
        "vote": {rule: dataclasses.asdict(NeighbourVote(with_default=rule == "vote"))
                 for rule in ("vote", "vote_without_default")},
        "artifacts": str(args.artifacts.relative_to(ROOT)) if args.artifacts.is_relative_to(ROOT) else str(args.artifacts),
        "seconds": round(time.perf_counter() - started, 1),
        "summary": results, "rows": rows_out,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    return 0


def _revision() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    raise SystemExit(main())
