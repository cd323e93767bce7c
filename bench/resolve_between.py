"""The first resolve of keys no tuning names: RMSNorm keys between the tuned ones, served
from ``artifacts/sm90`` by the nearest-key step and the family's rule between tuned keys
(which reads every candidate its neighbours timed), each key once in a process, so every
neighbour it reads is read for the first time or shared with the keys before it, as a
serving process meets them.

Each run is a fresh process per version (``--against NAME=PYTHONPATH``, repeatable,
``python -m bench.tree_at COMMIT DEST`` makes one), the versions interleaved; a process
builds its resolver and resolves one tuned key first (the folder's index, the imports),
then times the first resolve of every key of the grid.  Recorded per version: the median
over runs of the mean ms per key, and whether every version served the same configs.

    python -m bench.resolve_between [--grid "M=... N=... dtype=bf16"] [--runs 5] \\
        [--against NAME=PYTHONPATH] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import add_against, compile_bytecode, versions_of, write_result

ROOT = Path(__file__).resolve().parents[1]
GRID = "M=48,420,1800,7000,24000 N=1280,3200,4480,7680,10752 dtype=bf16"
"""The 25 keys tuned on an H100 for docs/benchmarks.md's off-grid table, none in the package."""
DEVICE = "sm90:132:NVIDIA H100 80GB HBM3"

RUN = """
import json, sys, time
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.registry import DeviceQuery, Resolver
keys, (arch, units, product) = json.loads(sys.argv[1]), sys.argv[2].split(":", 2)
query = DeviceQuery("nvidia", arch, product, int(units), ())
resolver = Resolver([sys.argv[3]])
resolver.resolve(SPEC, SPEC.check_key(SPEC.complete_key({"M": 4096, "N": 4096, "dtype": "bf16"})), query)
served, started = [], time.perf_counter()
for key in keys:
    served.append(dict(resolver.resolve(SPEC, SPEC.check_key(SPEC.complete_key(key)), query).config))
took = time.perf_counter() - started
print(json.dumps({"ms_per_key": took * 1e3 / len(keys), "served": served}, sort_keys=True))
"""


def grid_keys(text: str) -> list[dict[str, Any]]:
    """The keys of ``text`` (``M=1,2 N=128 dtype=bf16``), every combination."""
    from flyconfigs.tuner.grid import parse_grid

    return parse_grid(text)


def one_run(path: str, keys: list[dict[str, Any]], device: str, folder: Path) -> dict[str, Any]:
    """A fresh process of the version at ``path`` (``""``: this checkout)."""
    env = {**os.environ, "PYTHONPATH": path or str(ROOT)}
    # Started outside every checkout: a Python started in one imports that one first.
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps(keys), device, str(folder)], env=env,
                          capture_output=True, text=True, check=False, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise SystemExit(f"a run of {path or 'this checkout'} failed: {done.stderr[-800:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--grid", default=GRID, help=f"the keys (default: {GRID})")
    parser.add_argument("--device", default=DEVICE, help=f"arch:units:product (default: {DEVICE})")
    parser.add_argument("--folder", type=Path, default=ROOT / "artifacts" / "sm90")
    parser.add_argument("--runs", type=int, default=5)
    add_against(parser)
    parser.add_argument("--out", type=Path, help="folder for resolve-between.json (default: print only)")
    args = parser.parse_args(argv)
    versions = versions_of(parser, args.against)
    for path in versions.values():
        compile_bytecode(Path(path.split(os.pathsep)[-1]) if path else ROOT)
    keys = grid_keys(args.grid)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in versions}
    for _ in range(args.runs):
        for name, path in versions.items():
            runs[name].append(one_run(path, keys, args.device, args.folder))
    served = {name: r[0]["served"] for name, r in runs.items()}
    figures = {name: {"ms_per_key_median": round(statistics.median(x["ms_per_key"] for x in r), 2),
                      "ms_per_key_runs": [round(x["ms_per_key"], 2) for x in r]} for name, r in runs.items()}
    result = {"grid": args.grid, "keys": len(keys), "device": args.device, "runs": args.runs,
              "versions": versions, "figures": figures,
              "same_configs": all(s == served["this"] for s in served.values()), "load_average": os.getloadavg()}
    print(json.dumps(result, indent=1))
    if args.out:
        print(f"-> {write_result('resolve-between', result, args.out)}")


if __name__ == "__main__":
    main()
