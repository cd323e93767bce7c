"""Resolve costs, measured in one run: a memo hit; the first resolve in a fresh process
with 20 installed data packages of 500 artifacts each (20 targets, and the worst case of
all 20 for the device's own target); and a bare
``importlib.metadata.entry_points()`` call in the same environment as the yardstick.
With ``--out FOLDER`` writes FOLDER/resolve.json.

    python -m bench.resolve [--packages 20] [--artifacts 500] [--runs 7] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import quantiles, write_result
from tests.distributions import install_data_package
from tests.factories import H200, make_artifact

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}

FIRST_RESOLVE = """
import time, json
t0 = time.perf_counter()
import flyconfigs
t1 = time.perf_counter()
r = flyconfigs.resolve("rmsnorm", {key}, device="sm90:132:NVIDIA H200")
t2 = time.perf_counter()
assert r.source == "package", r
from importlib import metadata
t3 = time.perf_counter()
metadata.entry_points()
t4 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "first_resolve_s": t2 - t1, "entry_points_s": t4 - t3}}))
"""

MEMO_HITS = """
import json, time
import flyconfigs
from flyconfigs.registry import DeviceQuery
key = {key}
flyconfigs.resolve("rmsnorm", key, device="sm90:132:NVIDIA H200")
device = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())
flyconfigs.resolve("rmsnorm", key, device=device)
hits, empty = [], []
for _ in range(200):
    start = time.perf_counter()
    for _ in range(1000):
        flyconfigs.resolve("rmsnorm", key, device=device)
    hits.append((time.perf_counter() - start) / 1000 * 1e6)
# The yardstick: a bare dict lookup of a tuple of the same size.
lookup = {{("rmsnorm", device, *key.items()): 1}}
for _ in range(200):
    start = time.perf_counter()
    for _ in range(1000):
        lookup.get(("rmsnorm", device, *key.items()))
    empty.append((time.perf_counter() - start) / 1000 * 1e6)
print(json.dumps({{"hits": hits, "empty": empty}}))
"""

TARGETS = [
    "sm90", "gfx942", "gfx950", "gfx90a", "gfx908", "gfx906", "gfx1030", "gfx1100", "gfx1101", "gfx1200",
    "gfx1201", "sm70", "sm75", "sm80", "sm86", "sm87", "sm89", "sm100", "sm120", "sm72",
]


def _populate(site: Path, packages: int, artifacts: int, same_target: bool) -> None:
    """``packages`` data packages of ``artifacts`` each: one per target (what a host
    with several vendors' packages has), or all for sm90 (the worst case)."""
    base = make_artifact(n_candidates=8)
    for p in range(packages):
        target = "sm90" if same_target else TARGETS[p % len(TARGETS)]
        vendor = "nvidia" if target.startswith("sm") else "amd"
        arts = []
        for i in range(artifacts):
            data = base.model_dump(mode="json")
            data["key"] = {**KEY, "M": 1 + i + p * artifacts}
            data["device"] = {**H200, "vendor": vendor, "arch": target, "compute_units": 132 if p == 0 else 100 + p}
            arts.append(type(base).model_validate(data))
        install_data_package(site, target, arts, name=f"flyconfigs-{target}-part{p:02d}", module=f"flyconfigs_{target}_part{p:02d}")


def _env(site: Path) -> dict[str, str]:
    """The environment of a process that has the packages of ``site`` installed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]), "FLYCONFIGS_NO_GPU_DETECT": "1"}
    env.pop("FLYCONFIGS_PATH", None)
    return env


def _first_resolves(site: Path, runs: int) -> list[dict[str, float]]:
    code = FIRST_RESOLVE.format(key=repr({**KEY, "M": 1}))
    return [
        json.loads(subprocess.run([sys.executable, "-c", code], env=_env(site), capture_output=True, text=True, check=True).stdout)
        for _ in range(runs)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--packages", type=int, default=20)
    parser.add_argument("--artifacts", type=int, default=500)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, help="folder for resolve.json (default: print only)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as worst_tmp:
        _populate(Path(worst_tmp), args.packages, args.artifacts, same_target=True)
        worst = _first_resolves(Path(worst_tmp), args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        _populate(site, args.packages, args.artifacts, same_target=False)
        runs = _first_resolves(site, args.runs)
        # In a process of its own, with the packages on its path as an install puts them.
        memo = json.loads(subprocess.run([sys.executable, "-c", MEMO_HITS.format(key=repr(KEY))], env=_env(site),
                                         capture_output=True, text=True, check=True).stdout)
        hits, empty = memo["hits"], memo["empty"]
    result = {
        "packages": args.packages,
        "artifacts_per_package": args.artifacts,
        "memo_hit_us": quantiles(hits),
        "bare_dict_lookup_same_key_us": quantiles(empty),
        "fresh_process_first_resolve_ms": quantiles([r["first_resolve_s"] * 1e3 for r in runs]),
        "fresh_process_first_resolve_all_same_target_ms": quantiles([r["first_resolve_s"] * 1e3 for r in worst]),
        "fresh_process_import_flyconfigs_ms": quantiles([r["import_s"] * 1e3 for r in runs]),
        "entry_points_call_ms": quantiles([r["entry_points_s"] * 1e3 for r in runs]),
        "targets": {"memo_hit_us": 1.0, "first_resolve_ms": 50.0},
    }
    path = write_result("resolve", result, args.out) if args.out else "(not written: no --out)"
    print(
        f"memo hit {result['memo_hit_us']['median']:.2f} us (dict lookup of the same key {result['bare_dict_lookup_same_key_us']['median']:.2f} us); "
        f"first resolve {result['fresh_process_first_resolve_ms']['median']:.1f} ms with {args.packages}x{args.artifacts} artifacts "
        f"of {args.packages} targets, {result['fresh_process_first_resolve_all_same_target_ms']['median']:.1f} ms when all are for the device's target "
        f"(import {result['fresh_process_import_flyconfigs_ms']['median']:.1f} ms); entry_points() {result['entry_points_call_ms']['median']:.1f} ms -> {path}"
    )


if __name__ == "__main__":
    main()
