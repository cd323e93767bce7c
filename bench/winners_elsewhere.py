"""What a GPU loses when it is served another GPU's tunings: for every artifact tuned on
device B (``here``), the time B measured for device A's winner of the same key
(``served``, from A's artifacts) against B's own winner.  Both times come from B's one
tuning run, which timed every candidate; A's winner counts only where B tried it.
Writes ``--out`` (JSON) when given.

    python -m bench.winners_elsewhere --served artifacts/sm90 --here TUNED_ON_B [--out FILE]

A ``--served`` folder that holds several products' tunings needs ``--served-product``.

B's winner was timed in the final, most other candidates only in the screen, a shorter
timing in groups (schema 1.2's ``timed_in``; for older files the sample count against the
final protocol's says which).  A screen time is not a final time, so each row says where
A's winner was timed and the summary gives the final-only figures beside the mixed ones.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from bench.common import machine
from flyconfigs.kernels.measured import artifacts_of, timed_in
from flyconfigs.schema.pack import folder_artifacts


def _key(artifact: object) -> tuple[object, ...]:
    return (artifact.kernel.name, *sorted(artifact.key.items()))  # type: ignore[attr-defined]


def _config(config: object, defaults: dict[str, object]) -> tuple[tuple[str, object], ...]:
    # A tunable added after an artifact was made is absent from its configs: it had its default.
    return tuple(sorted({**defaults, **dict(config)}.items()))  # type: ignore[call-overload]


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--served", type=Path, required=True, help="artifacts of device A (what is served)")
    parser.add_argument("--here", type=Path, required=True, help="artifacts tuned on device B")
    parser.add_argument("--served-product", help="device A's product, when --served holds several")
    parser.add_argument("--kernel", default="rmsnorm")
    parser.add_argument("--defaults", default='{"cache_hints": "none"}',
                        help="JSON values of tunables that older configs lack")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    defaults = json.loads(args.defaults)
    served = {_key(a): a for _, a in artifacts_of(args.served, args.kernel, args.served_product, "--served-product")}
    rows, untried, unserved = [], [], 0
    device = None
    for here in folder_artifacts(args.here, args.kernel):
        device = here.device
        other = served.get(_key(here))
        if other is None or here.winner.timing is None:
            unserved += 1
            continue
        wanted = _config(other.winner.config, defaults)
        tried = [c for c in here.candidates if c.timing and _config(c.config, defaults) == wanted]
        if not tried:
            untried.append(dict(here.key))
            continue
        served_us = tried[0].timing.median_us  # type: ignore[union-attr]
        rows.append({"key": dict(here.key), "served_us": served_us, "own_us": here.winner.timing.median_us,
                     "ratio": served_us / here.winner.timing.median_us, "served_config": dict(other.winner.config),
                     "own_config": dict(here.winner.config), "served_timed_in": timed_in(tried[0], here)})
    ratios = [r["ratio"] for r in rows]
    summary = {"keys": len(rows), "geomean": _geomean(ratios), "max": max(ratios, default=None),
               **{f"over_{t}": sum(r > t for r in ratios) for t in (1.01, 1.03, 1.05, 1.10)},
               "not_tried_here": len(untried), "not_served": unserved}
    for stage in ("final", "screen"):
        staged = [r["ratio"] for r in rows if r["served_timed_in"] == stage]
        summary[f"served_timed_in_{stage}"] = {"keys": len(staged), "geomean": _geomean(staged),
                                               "max": max(staged, default=None)}
    small = [r["ratio"] for r in rows if r["key"].get("M", 0) <= 16]
    if small:
        summary["M_le_16"] = {"keys": len(small), "geomean": _geomean(small), "over_1.03": sum(r > 1.03 for r in small)}
    print(json.dumps(summary, indent=1))
    for row in sorted(rows, key=lambda r: -r["ratio"])[:10]:
        print(f"{row['ratio']:.3f}x {row['key']}: served {row['served_config']} own {row['own_config']}")
    if args.out:
        result = {"what": "time on the here device of the served device's winner over its own winner, from its tuning run",
                  "served_from": sorted({a.device.product for a in served.values()}),
                  "here": device.model_dump(mode="json") if device else None, "summary": summary,
                  "rows": rows, "machine": machine()}
        args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
