"""What storing a compiled kernel in the on-disk compile cache costs as the cache grows:
``--entries`` stores of ``--size``-byte code objects into a fresh cache (each store a
separate entry, as a cold tuning run makes them), in ``--processes`` processes at once
(the tuner's compile pool), timed per tenth of the entries.  With ``--out FILE`` writes
the result there.

    python -m bench.compile_cache [--entries 13189] [--size 20000] [--processes 2] [--out FILE]

13,189 is how many distinct variants a cold tuning of the whole RMSNorm grid compiles on
sm90 (the committed artifacts' candidates, counted by the kernel's build step).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine


def _store(root: str, start: int, stop: int, size: int) -> float:
    from flyconfigs.gpu.cache import CompileCache

    cache = CompileCache(Path(root), max_bytes=1 << 40)
    code = b"\x7fELF" + b"x" * (size - 4)
    started = time.perf_counter()
    for i in range(start, stop):
        cache.put(hashlib.sha256(f"variant {i}".encode()).hexdigest(), code, {"lowered_name": "k"})
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=13189)
    parser.add_argument("--size", type=int, default=20000, help="bytes of each code object")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    tenth = max(1, -(-args.entries // 10))
    laps = []
    with tempfile.TemporaryDirectory() as root, mp.get_context("spawn").Pool(args.processes) as pool:
        started = time.perf_counter()
        for start in range(0, args.entries, tenth):
            stop = min(args.entries, start + tenth)
            bounds = [start + (stop - start) * p // args.processes for p in range(args.processes + 1)]
            lap = time.perf_counter()
            pool.starmap(_store, [(root, a, b, args.size) for a, b in zip(bounds, bounds[1:])])
            laps.append({"entries_before": start, "stores": stop - start, "seconds": time.perf_counter() - lap})
            print(f"{stop:6d} entries: {laps[-1]['seconds']:.2f} s for the last {stop - start}", flush=True)
        total = time.perf_counter() - started
    result = {"what": "stores into a fresh compile cache, timed per tenth of the entries", "entries": args.entries,
              "size": args.size, "processes": args.processes, "seconds": total, "laps": laps, "machine": machine()}
    print(f"{args.entries} stores in {total:.1f} s")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
