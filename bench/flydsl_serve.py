"""What flyconfigs adds to a FlyDSL ``Autotuner`` call, on the CPU with the launch stubbed
(the kernel is a Python function that does nothing, which FlyDSL's autotuner accepts like
its JIT functions): per call, FlyDSL alone serving its own ``default`` hook and its own
cache, against :func:`flyconfigs.adapters.flydsl.serve` serving a warm call from an
installed data package (a real distribution on ``PYTHONPATH``), and falling through to the
tuner's default for a key the package does not hold; the hook's own cost; and a bare
dictionary lookup as the yardstick.  The device is ``FLYCONFIGS_DEVICE`` (an MI300X).
With ``--out FOLDER`` writes FOLDER/flydsl-serve.json.

    python -m bench.flydsl_serve [--runs 21] [--calls 2000] [--out bench/results]
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

MEASURE = """
import json, os, sys, time
from flydsl.autotune import Autotuner, Config
from flyconfigs.adapters.flydsl import serve

class Tensor:
    def __init__(self, shape, dtype="torch.bfloat16"):
        self.shape, self.dtype = shape, dtype

def gemm(a, m, scale, BLOCK: int = 0, stages: int = 1):
    pass  # the stubbed launch

CONFIGS = [Config(BLOCK=64, stages=2), Config(BLOCK=128, stages=3)]
args = (Tensor((64, 4096)), 64, 0.5)
untuned = (Tensor((4096, 4096)), 4096, 0.5)
heuristic = Config(BLOCK=32, stages=1)

def tuner(**options):
    return Autotuner(gemm, CONFIGS, ["a", "m"], 1, 1, artifact_name="acme_gemm", **options)

def per_call(cases, calls, runs):
    # Microseconds per call of each case, the cases interleaved run by run so that the
    # load of a shared machine falls on all of them alike.
    out = {name: [] for name in cases}
    for fn, call_args in cases.values():
        fn(*call_args)
    for _ in range(runs):
        for name, (fn, call_args) in cases.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn(*call_args)
            out[name].append((time.perf_counter() - start) / calls * 1e6)
    return out

calls, runs = int(sys.argv[1]), int(sys.argv[2])
# Built before FlyDSL's search below saves its winner to FlyDSL's disk cache, which a
# tuner built later would load (and serve before any hook).
alone = tuner(default=lambda *a, **k: heuristic)
served = serve(tuner(default=lambda *a, **k: heuristic))
cached = tuner(do_bench_fn=lambda call, warmup, rep: 1.0)
cached.resolve_config(*args)  # FlyDSL's search: the winner is in its cache now
assert served.resolve_config(*args).to_dict() == {"BLOCK": 128, "stages": 3}, served.default.last
assert served.default.last.source == "package", served.default.last
assert served.resolve_config(*untuned) is heuristic
lookup = {("flydsl.acme_gemm", 3, (), (list, (64, 4096)), (int, 64)): heuristic}
probe = ("flydsl.acme_gemm", 3, (), (list, (64, 4096)), (int, 64))
print(json.dumps(per_call({
    "flydsl_default_resolve_us": (alone.resolve_config, args),
    "flydsl_cache_resolve_us": (cached.resolve_config, args),
    "served_resolve_us": (served.resolve_config, args),
    "served_untuned_resolve_us": (served.resolve_config, untuned),
    "flydsl_default_call_us": (alone, args),
    "served_call_us": (served, args),
    "hook_served_us": (served.default, args),
    "dict_lookup_us": (lookup.get, (probe,)),
}, calls, runs)))
"""


def _package(root: Path) -> None:
    """``flyconfigs-gfx942`` holding a FlyDSL tuning of ``acme_gemm`` at ``m=64`` on an MI300X,
    imported as ``flyconfigs import flydsl`` imports FlyDSL's file."""
    from flyconfigs.cli import main
    from flyconfigs.schema import load_artifact
    from flyconfigs.schema.flydsl import flydsl_file_name
    from tests.distributions import install_data_package

    identity = {"name": "acme_gemm", "key": {"a": [64, 4096], "m": 64},
                "device": {"name": "AMD Instinct MI300X", "arch": "gfx942", "compute_units": 304}}
    offline = root / "offline"
    offline.mkdir()
    payload = {"version": 1, "identity": identity, "config": {"BLOCK": 128, "stages": 3}}
    (offline / flydsl_file_name(identity)).write_text(json.dumps(payload, sort_keys=True, indent=2) + "\n")
    if main(["import", "flydsl", str(offline), "--out", str(root / "imported")]) != 0:
        raise SystemExit("the FlyDSL file did not import")
    install_data_package(root / "site", "gfx942", [load_artifact(p) for p in (root / "imported").iterdir()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _package(root)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "site"), str(Path.cwd())]),
               "FLYCONFIGS_DEVICE": "gfx942:304:AMD Instinct MI300X", "FLYDSL_AUTOTUNE_CACHE_DIR": str(root / "cache"),
               "FLYCONFIGS_NO_GPU_DETECT": "1"}
        env.pop("FLYDSL_AUTOTUNE_CONFIG_DIR", None)
        env.pop("FLYDSL_AUTOTUNE", None)
        done = subprocess.run([sys.executable, "-c", MEASURE, str(args.calls), str(args.runs)], env=env,
                              capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    samples = json.loads(done.stdout.strip().splitlines()[-1])
    result = {name: quantiles(values) for name, values in samples.items()}
    result["protocol"] = {"calls_per_sample": args.calls, "samples": args.runs, "launch": "stubbed (a Python no-op)",
                          "device": "FLYCONFIGS_DEVICE=gfx942:304:AMD Instinct MI300X"}
    for name, row in result.items():
        if name != "protocol":
            print(f"{name:30s} {row['median']:8.3f} us")
    if args.out is not None:
        print(write_result("flydsl-serve", result, args.out))


if __name__ == "__main__":
    main()
