"""What tuning through Ray costs against a local run, on the same keys in one run.

Three runs of ``flyconfigs tune`` on this machine, one after the other: ``--devices 0``
with a cold compile cache (it fills the cache), ``--ray`` (a local Ray cluster with this
machine's GPUs) and ``--devices 0`` again, both with the cache warm; GPU 0's identity
is recorded with them.  The overhead is
the Ray run's wall time against the second local run's; both tune the same keys with
the same budget, and each writes its own folder.  Writes ``bench/results/<name>.json``.

    python -m bench.fleet_overhead --key-grid "M=1,128,4096,65536 N=1024,4096,16384 dtype=bf16"
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine, write_result


def _run(arguments: list[str], out: Path) -> dict[str, object]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "flyconfigs", "tune", *arguments, "--out", str(out), "--json"],
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(arguments)} failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    return {"arguments": arguments, "wall_s": wall, "seconds": summary["seconds"], "tuned": summary["tuned"],
            "tuned_on": summary["tuned_on"], "left_out": summary["left_out"], "lost": summary["lost"],
            "winners": sorted(Path(p).name for p in summary["artifacts"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", default="rmsnorm")
    parser.add_argument("--key-grid", required=True)
    parser.add_argument("--budget", type=int)
    parser.add_argument("--name", default="fleet-overhead-h200")
    parser.add_argument("--out", type=Path, help="folder for the result (default bench/results)")
    args = parser.parse_args()
    common = [args.kernel, "--key-grid", args.key_grid] + (["--budget", str(args.budget)] if args.budget else [])
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        cold = _run([*common, "--devices", "0"], root / "cold")
        ray = _run([*common, "--ray"], root / "ray")
        local = _run([*common, "--devices", "0"], root / "local")
    keys = local["tuned"]
    from flyconfigs.gpu import current_identity

    payload = {
        "device": current_identity().model_dump(mode="json"),  # GPU 0, which --devices 0 tuned on
        "kernel": args.kernel, "key_grid": args.key_grid, "budget": args.budget, "keys": keys,
        "runs": {"devices-0-cold-cache": cold, "ray-warm-cache": ray, "devices-0-warm-cache": local},
        "ray_overhead_s": float(ray["wall_s"]) - float(local["wall_s"]),  # type: ignore[arg-type]
        "ray_over_local": float(ray["wall_s"]) / float(local["wall_s"]),  # type: ignore[arg-type]
        "machine": machine(),
    }
    path = write_result(args.name, payload, args.out)
    print(f"{keys} keys: --devices 0 {local['wall_s']:.1f} s, --ray {ray['wall_s']:.1f} s "
          f"(+{payload['ray_overhead_s']:.1f} s, {payload['ray_over_local']:.3f}x); cold cache {cold['wall_s']:.1f} s -> {path}")


if __name__ == "__main__":
    main()
