"""The first resolve over the committed artifacts (``artifacts/sm90`` and
``artifacts/gfx942``), in a fresh process each run, from the two places a user puts
them (runs of the two interleaved): folders in ``FLYCONFIGS_PATH`` (local tuning output, no manifest) and installed
data packages (``flyconfigs-sm90`` and ``flyconfigs-gfx942``, each with its manifest).
The key asked is a committed one, so both serve an artifact; the process's CPU time
for the first resolve is recorded beside the wall time (on a shared machine the wall time
grows with the load, the CPU time much less), and in runs of their own the loader's part
alone: the first resolve once the kernel's module (and with it pydantic and the schema
models, the larger part of the first call) is imported; each run also resolves one
key off the tuned grid (the nearest-key step) in the same process.  With ``--out
FOLDER`` writes FOLDER/resolve-committed.json.

    python -m bench.resolve_committed [--runs 7] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import machine, quantiles, write_result
from flyconfigs.publish.contents import Contents, collect
from tests.distributions import install_data_package

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("sm90", "gfx942")

FIRST_RESOLVE = """
import json, time
t0 = time.perf_counter()
import flyconfigs
t1 = time.perf_counter()
c1 = time.process_time()
if {preimport}:
    import flyconfigs.kernels.rmsnorm
tk = time.perf_counter()
r = flyconfigs.resolve("rmsnorm", {key}, device={device!r})
t2 = time.perf_counter()
c2 = time.process_time()
assert r.source == {source!r} and r.key_match == "exact", r
n = flyconfigs.resolve("rmsnorm", {{**{key}, "M": {key}["M"] + 3}}, device={device!r})
t3 = time.perf_counter()
assert n.source == {source!r} and n.key_match == "nearest", n
print(json.dumps({{"import_s": t1 - t0, "first_resolve_s": t2 - t1, "first_resolve_cpu_s": c2 - c1,
                  "loader_s": t2 - tk, "first_nearest_s": t3 - t2}}))
"""


def _committed() -> tuple[dict[str, Contents], dict[str, object], str]:
    """Each target folder's contents (single artifacts, tables and packs, checked as
    ``publish`` checks them), and the key and device asked: the first RMSNorm key served
    from ``sm90``, in the order of the artifacts' own file names."""
    found = {t: collect(ROOT / "artifacts" / t, t) for t in TARGETS}
    # The artifact whose single file would come first, as when each was one.
    sample = min((a for a in found["sm90"].served() if a.kernel.name == "rmsnorm"), key=lambda a: a.file_name())
    d = sample.device
    device = f"{d.arch}:{d.compute_units}:{d.product}" + (f":{','.join(d.features)}" if d.features else "")
    return found, dict(sample.key), device


def _runs(env: dict[str, str], key: dict[str, object], device: str, source: str, runs: int,
          preimport: bool = False) -> list[dict[str, float]]:
    code = FIRST_RESOLVE.format(key=repr(key), device=device, source=source, preimport=preimport)
    out = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        out.append(json.loads(done.stdout))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, help="folder for resolve-committed.json (default: print only)")
    parser.add_argument("--key", help="the key to ask, as JSON (default: the first committed RMSNorm key)")
    parser.add_argument("--device", help="the device to ask for with --key (arch:units:product)")
    args = parser.parse_args()
    files, key, device = _committed()
    if args.key is not None:
        key, device = json.loads(args.key), args.device
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    base = {**os.environ, "FLYCONFIGS_NO_GPU_DETECT": "1"}
    base.pop("FLYCONFIGS_PATH", None)
    path_env = {**base, "FLYCONFIGS_PATH": os.pathsep.join(str(ROOT / "artifacts" / t) for t in TARGETS)}
    path_runs: list[dict[str, float]] = []
    package_runs: list[dict[str, float]] = []
    path_loader: list[dict[str, float]] = []
    package_loader: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for target in TARGETS:
            install_data_package(Path(tmp), target, files[target].artifacts, tables=files[target].tables,
                                 packs=files[target].packs)
        package_env = {**base, "PYTHONPATH": os.pathsep.join([tmp, os.environ.get("PYTHONPATH", "")])}
        for _ in range(args.runs):  # interleaved, so a load that comes and goes weighs on both alike
            path_runs += _runs(path_env, key, device, "override", 1)
            package_runs += _runs(package_env, key, device, "package", 1)
            path_loader += _runs(path_env, key, device, "override", 1, preimport=True)
            package_loader += _runs(package_env, key, device, "package", 1, preimport=True)
    path_ms = quantiles([r["first_resolve_s"] * 1e3 for r in path_runs])
    package_ms = quantiles([r["first_resolve_s"] * 1e3 for r in package_runs])
    result = {
        "artifacts": {t: v.count for t, v in files.items()},
        "files": {t: sum(1 for p in (ROOT / "artifacts" / t).iterdir() if p.suffix in (".json", ".gz"))
                  for t in TARGETS},
        "key": key,
        "device": device,
        "machine": machine(),
        "load_average_1min_before": load,
        "load_average_1min_after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        # Runs without compiled bytecode (PYTHONDONTWRITEBYTECODE with no __pycache__)
        # compile every module they import and are slower; say which this was.
        "bytecode_written": not os.environ.get("PYTHONDONTWRITEBYTECODE"),
        "flyconfigs_path_first_resolve_ms": path_ms,
        "packages_first_resolve_ms": package_ms,
        "flyconfigs_path_first_resolve_cpu_ms": quantiles([r["first_resolve_cpu_s"] * 1e3 for r in path_runs]),
        "packages_first_resolve_cpu_ms": quantiles([r["first_resolve_cpu_s"] * 1e3 for r in package_runs]),
        "flyconfigs_path_loader_ms": quantiles([r["loader_s"] * 1e3 for r in path_loader]),
        "packages_loader_ms": quantiles([r["loader_s"] * 1e3 for r in package_loader]),
        "flyconfigs_path_first_nearest_ms": quantiles([r["first_nearest_s"] * 1e3 for r in path_runs]),
        "packages_first_nearest_ms": quantiles([r["first_nearest_s"] * 1e3 for r in package_runs]),
        "import_flyconfigs_ms": quantiles([r["import_s"] * 1e3 for r in path_runs]),
        "path_over_packages": path_ms["median"] / package_ms["median"],
        "targets": {"flyconfigs_path_first_resolve_ms": 400.0, "path_over_packages": 1.5},
    }
    where = write_result("resolve-committed", result, args.out) if args.out else "(not written: no --out)"
    print(f"first resolve over {sum(result['artifacts'].values())} committed artifacts: FLYCONFIGS_PATH "
          f"{path_ms['median']:.0f} ms, installed packages {package_ms['median']:.0f} ms "
          f"({result['path_over_packages']:.2f}x) -> {where}")


if __name__ == "__main__":
    main()
