"""What storing a compiled kernel in the on-disk compile cache costs as the cache grows:
``--entries`` stores of ``--size``-byte code objects into a fresh cache (each store a
separate entry, as a cold tuning run makes them), in ``--processes`` processes at once
(the tuner's compile pool), timed per tenth of the entries.  ``--against NAME=FILE``
(repeatable) times another version of the cache module too (``git show
COMMIT:flyconfigs/gpu/cache.py > FILE``); ``--rounds`` runs of each, the versions
interleaved in one run, each run in a fresh cache, with the load average before and
after each.  With ``--out FILE`` writes the
result there.

    python -m bench.compile_cache [--entries 13189] [--size 20000] [--processes 2] [--rounds 1] [--against NAME=FILE]  [--out FILE]

13,189 is how many distinct variants a cold tuning of the whole RMSNorm grid compiles on
sm90 (the committed artifacts' candidates, counted by the kernel's build step).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import machine


def _cache_class(implementation: str | None) -> Any:
    if implementation is None:
        from flyconfigs.gpu.cache import CompileCache

        return CompileCache
    spec = importlib.util.spec_from_file_location("_compile_cache_against", implementation)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CompileCache


def _store(root: str, start: int, stop: int, size: int, implementation: str | None) -> float:
    cache = _cache_class(implementation)(Path(root), max_bytes=1 << 40)
    code = b"\x7fELF" + b"x" * (size - 4)
    started = time.perf_counter()
    for i in range(start, stop):
        cache.put(hashlib.sha256(f"variant {i}".encode()).hexdigest(), code, {"lowered_name": "k"})
    return time.perf_counter() - started


def _warm(implementation: str | None) -> None:
    """Import the cache module in a worker before the timing starts."""
    _cache_class(implementation)


def _run(pool: Any, entries: int, size: int, processes: int, implementation: str | None) -> dict[str, Any]:
    tenth = max(1, -(-entries // 10))
    laps = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as root:
        started = time.perf_counter()
        for start in range(0, entries, tenth):
            stop = min(entries, start + tenth)
            bounds = [start + (stop - start) * p // processes for p in range(processes + 1)]
            lap = time.perf_counter()
            pool.starmap(_store, [(root, a, b, size, implementation) for a, b in zip(bounds, bounds[1:], strict=False)])
            laps.append({"entries_before": start, "stores": stop - start, "seconds": time.perf_counter() - lap})
        total = time.perf_counter() - started
    return {"seconds": total, "laps": laps, "load_average_before": load_before, "load_average_after": os.getloadavg()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=13189)
    parser.add_argument("--size", type=int, default=20000, help="bytes of each code object")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="runs of each version, interleaved")
    parser.add_argument("--against", action="append", default=[], metavar="NAME=FILE",
                        help="another version's cache module, timed beside this one (repeatable)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    versions: dict[str, str | None] = {"this": None}
    for against in args.against:
        name, sep, file = against.partition("=")
        if not sep or not Path(file).is_file():
            parser.error(f"--against {against!r}: give NAME=FILE, FILE a cache module")
        versions[name] = str(Path(file).resolve())
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in versions}
    with mp.get_context("spawn").Pool(args.processes) as pool:
        for implementation in versions.values():
            pool.map(_warm, [implementation] * args.processes * 4)
        for _ in range(args.rounds):
            for name, implementation in versions.items():
                run = _run(pool, args.entries, args.size, args.processes, implementation)
                runs[name].append(run)
                print(f"{name}: {args.entries} stores in {run['seconds']:.1f} s "
                      f"(load {run['load_average_before'][0]:.2f} before, {run['load_average_after'][0]:.2f} after)", flush=True)
    result: dict[str, Any] = {
        "what": "stores into a fresh compile cache, timed per tenth of the entries", "entries": args.entries,
        "size": args.size, "processes": args.processes, "machine": machine(),
        "seconds": statistics.median(r["seconds"] for r in runs["this"]), "runs": runs["this"],
    }
    result["against"] = {name: {"implementation": Path(file).name,
                                "seconds": statistics.median(r["seconds"] for r in runs[name]), "runs": runs[name]}
                         for name, file in versions.items() if file is not None}
    print(f"{args.entries} stores in {result['seconds']:.1f} s (median of {args.rounds})"
          + "".join(f"; {name} {other['seconds']:.1f} s" for name, other in result["against"].items()))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
