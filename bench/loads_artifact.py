"""``loads_artifact`` of the loader benchmark's artifact (64 candidates, compact canonical
JSON) in this checkout and in other commits' trees (``--against NAME=PYTHONPATH``, made by
``python -m bench.tree_at``), ``--rounds`` fresh processes of each, interleaved: each
process times ``--repeat`` batches of ``--number`` calls by CPU time (``process_time``,
less moved by other work on a shared machine than wall time) and by wall time.  Records
the load average before and after.  With ``--out FILE`` writes the result there.

    python -m bench.loads_artifact [--rounds 3] [--against NAME=PYTHONPATH] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import add_against, machine, versions_of

ROOT = Path(__file__).resolve().parent.parent

TIMED = """
import json, sys, time, timeit
sys.path.insert(0, {tests!r})
from flyconfigs.schema import loads_artifact
from factories import make_artifact
raw = make_artifact(n_candidates=64).to_json_bytes()
cpu = timeit.Timer(lambda: loads_artifact(raw), timer=time.process_time).repeat(number={number}, repeat={repeat})
wall = timeit.Timer(lambda: loads_artifact(raw)).repeat(number={number}, repeat={repeat})
print(json.dumps({{"bytes": len(raw), "cpu_us": [t / {number} * 1e6 for t in cpu], "wall_us": [t / {number} * 1e6 for t in wall]}}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--number", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=9)
    add_against(parser)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    versions = versions_of(parser, args.against)
    found: dict[str, dict[str, list[float]]] = {name: {"cpu_us": [], "wall_us": []} for name in versions}
    load_before = os.getloadavg()
    size = 0
    for _ in range(args.rounds):
        for name, path in versions.items():
            tests = str(Path(path.split(os.pathsep)[-1]) / "tests") if path else str(ROOT / "tests")
            env = {**os.environ, "PYTHONPATH": path} if path else dict(os.environ)
            code = TIMED.format(tests=tests, number=args.number, repeat=args.repeat)
            done = subprocess.run([sys.executable, "-c", code], env=env, cwd=path.split(os.pathsep)[0] if path else ROOT,
                                  capture_output=True, text=True, check=True)
            sample = json.loads(done.stdout)
            size = sample["bytes"]
            for kind in ("cpu_us", "wall_us"):
                found[name][kind] += sample[kind]

    def figures(samples: dict[str, list[float]]) -> dict[str, Any]:
        return {kind: {"min": min(values), "median": statistics.median(values), "n": len(values)} for kind, values in samples.items()} | {
            "per_second_by_min_cpu": 1e6 / min(samples["cpu_us"])}

    result = {"benchmark": "loads-artifact", "machine": machine(), "artifact_bytes": size,
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "versions": {name: figures(found[name]) for name in versions}}
    for name, row in result["versions"].items():
        print(f"{name}: {row['cpu_us']['min']:.0f} us CPU (min), {row['cpu_us']['median']:.0f} median; "
              f"wall {row['wall_us']['min']:.0f} us min -> {row['per_second_by_min_cpu']:.0f}/s")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
