"""A key no grid names is served a config within 3% of what tuning that key would pick.

``--tuned DIR`` is a folder of artifacts that ``flyconfigs tune FAMILY --key-grid unseen
--out DIR`` wrote on this GPU (every candidate timed, the winner picked).  For each of
them (this GPU's product only) the benchmark resolves the key as a user's process would,
from the installed data packages and ``FLYCONFIGS_PATH`` as given, but with DIR left out
(a ``FLYCONFIGS_PATH`` entry that is DIR is dropped; one that holds DIR is refused), and
records where the served config came from (source, origin, the key it was tuned at,
whether it was adapted).  Then the served config, the tuned winner and the family's
default are checked against the reference and timed in one interleaved measurement per
key, with the tuner's protocol (rotated inputs, graph replay, medians).  Writes ``--out``
(JSON): per key the three times and the ratios served/tuned and default/tuned, and a
summary (geometric means, the fraction within 3%, the worst key).  Any family the tuner
tunes is measured the same way (its ``workload``; compiled ahead through the GPU layer
where its ``build`` asks for it).

    flyconfigs tune rmsnorm --key-grid unseen --out DIR
    python -m bench.off_grid rmsnorm --tuned DIR --out FILE
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import machine
from flyconfigs.kernels.measured import artifacts_of
from flyconfigs.kernels.plugin import TunableKernel, tunable_kernel
from flyconfigs.registry import PATH_ENV, DeviceQuery, Resolution, Resolver
from flyconfigs.registry.plugin import config_token
from flyconfigs.schema import Artifact

__all__ = ["WITHIN", "main", "paths_without", "plan", "served_record", "summary", "time_configs", "tuned_artifacts"]

WITHIN = 1.03
"""The promise: the served config at most 3% slower than the tuned winner."""


def paths_without(tuned: Path, value: str | None = None) -> tuple[list[str], list[str]]:
    """The ``FLYCONFIGS_PATH`` entries (``value``, default the environment's) with
    ``tuned`` left out, and the entries dropped.  Raises :class:`SystemExit` naming an
    entry that holds ``tuned`` below it: its artifacts would be served from there."""
    here = tuned.resolve()
    kept, dropped = [], []
    for entry in (os.environ.get(PATH_ENV, "") if value is None else value).split(os.pathsep):
        if not entry:
            continue
        where = Path(entry).resolve()
        if where == here:
            dropped.append(entry)
        elif where in here.parents:
            raise SystemExit(f"{PATH_ENV} entry {entry} holds {tuned}: its tunings would be served; "
                             f"move {tuned} out of it")
        else:
            kept.append(entry)
    return kept, dropped


def tuned_artifacts(folder: Path, kernel: str, product: str) -> list[tuple[Path, Artifact]]:
    """``folder``'s measured artifacts of ``kernel`` tuned on ``product``; SystemExit
    naming ``folder`` when there is none, or naming a file whose winner was not timed."""
    found = artifacts_of(folder, kernel, product)
    if not found:
        raise SystemExit(f"{folder}: no {kernel} artifact tuned on {product}")
    for path, artifact in found:
        if not artifact.selection.measured or artifact.winner.timing is None:
            raise SystemExit(f"{path}: not a measured artifact (selection {artifact.selection.rule!r})")
    return found


def served_record(resolution: Resolution) -> dict[str, Any]:
    """Where a served config came from, as the result records it."""
    return {
        "config": dict(resolution.config),
        "source": resolution.source,
        "origin": resolution.origin,
        "version": resolution.version,
        "file": resolution.file,
        "layer": resolution.layer,
        "key_match": resolution.key_match,
        "matched_key": None if resolution.matched_key is None else dict(resolution.matched_key),
        "borrowed": resolution.borrowed,
        "selection": resolution.selection,
        "adapted_from": None if resolution.adapted_from is None else dict(resolution.adapted_from),
    }


def plan(decl: TunableKernel, tuned: Sequence[tuple[Path, Artifact]], resolver: Resolver,
         device: DeviceQuery, rules: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per tuned artifact: its key, the config ``resolver`` serves for that key
    on ``device`` (with its record), the tuned winner and the family's default now; and
    under ``rules`` what each of the given declarations (the family with another rule
    between tuned keys, :func:`bench.neighbour_vote.rules_of`) serves from the same
    sources."""
    rows = []
    for path, artifact in tuned:
        key = decl.check_key(dict(artifact.key))
        rows.append({
            "key": key,
            "file": path.name,
            "served": served_record(resolver.resolve(decl, key, device)),
            "tuned": dict(artifact.winner.config),
            "tuned_recorded_us": artifact.winner.timing.median_us if artifact.winner.timing else None,
            "default": decl.default_config(key, device),
            "rules": {name: {"config": dict(resolver.resolve(other, key, device).config)}
                      for name, other in (rules or {}).items()},
        })
    return rows


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The figures of a run's timed ``rows`` (each with ``served_us``, ``tuned_us`` and
    ``default_us``): over the keys served from another key's tuning or the default (a
    key some installed artifact names exactly is no test of generalization, and is only
    counted), the geometric means of served/tuned and default/tuned, the fraction within
    3% of tuned, and the worst key; where the served configs came from."""
    off = [r for r in rows if r["served"]["key_match"] != "exact"]
    served = [r["served_us"] / r["tuned_us"] for r in off]
    default = [r["default_us"] / r["tuned_us"] for r in off]
    worst = max(off, key=lambda r: r["served_us"] / r["tuned_us"], default=None)
    return {
        "keys": len(rows),
        "keys_served_exactly": len(rows) - len(off),
        "keys_off_grid": len(off),
        "geomean_served_over_tuned": _geomean(served),
        "served_within_3pct_fraction": sum(s <= WITHIN for s in served) / len(served) if served else None,
        "worst_served_over_tuned": None if worst is None else worst["served_us"] / worst["tuned_us"],
        "worst_key": None if worst is None else worst["key"],
        "geomean_default_over_tuned": _geomean(default),
        "default_within_3pct_fraction": sum(d <= WITHIN for d in default) / len(default) if default else None,
        "served_from": dict(sorted(Counter(f"{r['served']['source']}/{r['served']['key_match']}" for r in rows).items())),
        "served_adapted": sum(r["served"]["adapted_from"] is not None for r in rows),
        "rules": {name: _rule_figures(off, name) for name in (off[0].get("rules") or {})} if off else {},
    }


def _rule_figures(rows: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """For the rule ``name`` over ``rows``: geomean and worst of its config's time over the
    tuned winner's, and the keys where it is more than 3% slower than the default, all
    from the one interleaved measurement of each key."""
    ratios = [r["rules"][name]["us"] / r["tuned_us"] for r in rows]
    worse = sum(1 for r in rows if r["rules"][name]["us"] > WITHIN * r["default_us"])
    return {"geomean_over_tuned": _geomean(ratios), "worst_over_tuned": max(ratios),
            "within_3pct_fraction": sum(x <= WITHIN for x in ratios) / len(ratios), "worse_than_default": worse}


def time_configs(decl: TunableKernel, key: Mapping[str, Any], configs: Sequence[Mapping[str, Any]], backend: Any,
                 query: DeviceQuery, samples: int, names: Sequence[str] = ()) -> list[float]:
    """Check ``configs`` at ``key`` against the family's reference and time them in one
    interleaved measurement with the tuner's final protocol (rotated inputs, graph replay,
    held replays): their medians (µs), in order.  SystemExit naming the config (by
    ``names`` where given) that computes a wrong result."""
    import torch

    from flyconfigs.tuner.key import rotation
    from flyconfigs.tuner.options import TuneOptions
    from flyconfigs.tuner.timing import TimingPlan, measure

    device, options = backend.device(), TuneOptions()
    for config in configs:
        request = decl.build(config, key, query)
        if request is not None:
            backend.compile(request)  # through the GPU layer's cache, as the tuner compiles ahead
    final = rotation(decl.traffic(key), device, options, options.final_target_us)
    workload = decl.workload(key, final.copies, backend)
    for n, config in enumerate(configs):
        wrong = workload.check(config)
        if wrong:
            name = names[n] if n < len(names) else "a"
            raise SystemExit(f"{dict(key)}: the {name} config {dict(config)} is wrong: {wrong}")
    workload.release(configs)
    timing = TimingPlan(workload.copies, final.launches, warmup=options.warmup, samples=samples, hold=options.hold)
    medians = [m.median_us for m in measure([workload.launcher(c) for c in configs], timing)]
    workload.release([])
    del workload
    torch.cuda.empty_cache()
    return medians


def _time_row(decl: TunableKernel, row: dict[str, Any], backend: Any, query: DeviceQuery, samples: int) -> None:
    """Check and time ``row``'s served, tuned and default configs (and each rule's) in one
    interleaved measurement; adds their medians (µs) and ratios to ``row``."""
    configs = [row["served"]["config"], row["tuned"], row["default"]]
    slots = [config_token(c, decl.tunable_defaults) for c in configs]
    for rule in (row.get("rules") or {}).values():  # each distinct config once, however spelled
        slot = config_token(rule["config"], decl.tunable_defaults)
        if slot not in slots:
            configs.append(rule["config"])
            slots.append(slot)
    medians = time_configs(decl, row["key"], configs, backend, query, samples, ("served", "tuned", "default"))
    row.update(served_us=medians[0], tuned_us=medians[1], default_us=medians[2],
               served_over_tuned=medians[0] / medians[1], default_over_tuned=medians[2] / medians[1])
    for rule in (row.get("rules") or {}).values():
        rule["us"] = medians[slots.index(config_token(rule["config"], decl.tunable_defaults))]
        rule["over_tuned"] = rule["us"] / medians[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", nargs="?", default="rmsnorm", help="the family (default rmsnorm)")
    parser.add_argument("--tuned", type=Path, required=True, help="the tuning run's folder (--key-grid unseen)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--rule", action="append", default=[], choices=("nearest", "vote", "paired", "paired-se"),
                        help="also time what the family serves with this rule between tuned keys "
                             "(bench/neighbour_vote.py's rules; repeatable)")
    args = parser.parse_args()
    import torch

    from flyconfigs.gpu import get_backend

    decl = tunable_kernel(args.kernel)
    kept, dropped = paths_without(args.tuned)
    resolver = Resolver(kept)
    backend = get_backend()
    device = backend.device()
    query = DeviceQuery.of(device.identity)
    rules = None
    if args.rule:
        from bench.neighbour_vote import rules_of
        every = rules_of(decl)  # with the shipped default (no fold_table given: no refit)
        rules = {name: every[name] for name in args.rule}
    rows = plan(decl, tuned_artifacts(args.tuned, decl.name, device.product), resolver, query, rules)
    started = time.time()
    for row in rows:
        _time_row(decl, row, backend, query, args.samples)
        print(f"{row['key']}: served {row['served_us']:.2f} ({row['served']['source']}/{row['served']['key_match']}) "
              f"tuned {row['tuned_us']:.2f} default {row['default_us']:.2f} us", flush=True)
    result = summary(rows)
    payload = {"benchmark": "off-grid", "kernel": decl.name, "machine": machine(), "torch": torch.__version__,
               "device": device.model_dump(mode="json"), "tuned_folder": str(args.tuned),
               "served_paths": kept, "dropped_from_path": dropped,
               "packages": [f"{p.distribution} {p.version}" for p in resolver.packages()],
               "protocol": "the tuner's final timing (rotated inputs, graph replay, held replays), "
                           "served, tuned and default interleaved; medians",
               "wall_s": time.time() - started, "summary": result, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
