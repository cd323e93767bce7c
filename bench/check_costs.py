"""What checking and a first lookup cost when the data is large, each in a fresh
interpreter, its CPU time (user + system) and peak resident memory read from the
child's own resource usage (``os.wait4``):

- ``validate`` of one table of 166,000 rows (an RMSNorm table, every row a config the
  kernel accepts, 5.4 MB: the size a 166k-row upstream table reaches under the 8 MiB
  document bound), against ``validate`` of the same table's first 1,000 rows;
- ``doctor`` with the three aiter packages (``imported/aiter-<arch>``, published with
  ``publish_all`` and installed by unpacking their wheels into a site folder);
- the first RMSNorm resolve (a key no file holds: the default serves) with those
  packages installed, against the same with the three folders on ``FLYCONFIGS_PATH``
  instead (no package installed): the folders' tables must be indexed as lazily as the
  packages' (read only when their kernel is asked), so the two stay within 1.2x.

The runs of each pair are interleaved.  Writes ``bench/results/check-costs.json`` (or
``--out FOLDER``).

    python -m bench.check_costs [--runs 5] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from bench.common import quantiles, write_result

ROOT = Path(__file__).resolve().parents[1]
IMPORTED = ROOT / "imported"
ROWS = 166_000

RESOLVE = """
import json, time
t0, c0 = time.perf_counter(), time.process_time()
import flyconfigs
r = flyconfigs.resolve("rmsnorm", {"M": 3000, "N": 5000, "dtype": "bf16", "weight_dtype": "bf16"},
                       device="sm90:132:NVIDIA H200")
t1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"wall_s": t1 - t0, "cpu_s": c1 - c0, "source": r.source}))
"""


def _table(rows: int) -> dict[str, Any]:
    """An RMSNorm table of ``rows`` keys (M from 1 up, four row lengths), each row a config
    the kernel accepts on an H200."""
    from tests.factories import H200

    widths = (1024, 2048, 4096, 8192)
    body = [[1 + i // len(widths), widths[i % len(widths)], "bf16", "bf16", 256, 1, 8, "reg", 0] for i in range(rows)]
    return {
        "schema_version": "1.6", "form": "table",
        "kernel": {"name": "rmsnorm", "version": _rmsnorm_version(), "source_sha256": None},
        "device": H200,
        "columns": {"key": ["M", "N", "dtype", "weight_dtype"],
                    "config": ["threads", "rows_per_block", "vector_bytes", "row_storage", "occupancy"]},
        "rows": body,
        "selection": {"rule": "beat-default-beyond-noise"},
        "provenance": {"tool": "bench.check_costs", "backend": "nvidia"},
    }


def _rmsnorm_version() -> int:
    from flyconfigs.kernels.rmsnorm import SPEC

    return int(SPEC.version)


_LAUNCHER = """
import json, os, subprocess, sys, time
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
out = child.stdout.read()
_, status, usage = os.wait4(child.pid, 0)
print(json.dumps({"wall_s": time.perf_counter() - start, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "max_rss_mb": usage.ru_maxrss / 1024, "exit": os.waitstatus_to_exitcode(status),
                  "stdout": out.decode()}))
"""
"""Runs the measured command from a bare interpreter: a child's peak RSS counts the
memory of the process it was forked from, which here is a few MB, not the benchmark's."""


def _measure(argv: list[str], env: dict[str, str], cwd: str) -> dict[str, Any]:
    """Run ``argv``; its wall time, CPU time (user + system), peak RSS and exit status."""
    done = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"cpu_s": quantiles([r["cpu_s"] for r in runs]), "wall_s": quantiles([r["wall_s"] for r in runs]),
            "max_rss_mb": quantiles([r["max_rss_mb"] for r in runs]), "exit": sorted({r["exit"] for r in runs})}


def _install(site: Path, tmp: Path) -> list[str]:
    from flyconfigs.publish.build import publish_all

    releases = publish_all(IMPORTED, tmp / "dist")
    for release in releases:
        for wheel in (f for f in release.files if f.suffix == ".whl"):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
    return sorted(r.distribution for r in releases)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, help="folder for check-costs.json (default: bench/results)")
    args = parser.parse_args()
    python = sys.executable
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        from flyconfigs.schema import canonical_bytes

        big, small = tmp / "big" / "rmsnorm-table.json", tmp / "small" / "rmsnorm-table.json"
        data = _table(ROWS)
        for path, rows in ((big, ROWS), (small, 1000)):
            path.parent.mkdir()
            path.write_bytes(canonical_bytes({**data, "rows": data["rows"][:rows]}) + b"\n")
        big_bytes = big.stat().st_size
        base = {**os.environ, "FLYCONFIGS_NO_GPU_DETECT": "1", "PYTHONPATH": str(ROOT)}
        base.pop("FLYCONFIGS_PATH", None)
        validate: dict[str, list[dict[str, Any]]] = {"166k": [], "1k": []}
        for _ in range(args.runs):
            validate["166k"].append(_measure([python, "-m", "flyconfigs", "validate", str(big)], base, raw))
            validate["1k"].append(_measure([python, "-m", "flyconfigs", "validate", str(small)], base, raw))
        site = tmp / "site"
        site.mkdir()
        packages = _install(site, tmp)
        installed = {**base, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
        on_path = {**base, "FLYCONFIGS_PATH": os.pathsep.join(str(p) for p in sorted(IMPORTED.glob("aiter-*")))}
        doctor, resolve_installed, resolve_path = [], [], []
        for _ in range(args.runs):
            doctor.append(_measure([python, "-m", "flyconfigs", "doctor"], installed, raw))
            resolve_installed.append(_measure([python, "-c", RESOLVE], installed, raw))
            resolve_path.append(_measure([python, "-c", RESOLVE], on_path, raw))
    for runs in (resolve_installed, resolve_path):
        for run in runs:
            run.update({f"inner_{k}": v for k, v in json.loads(run.pop("stdout")).items()})
    for runs in (*validate.values(), doctor):
        for run in runs:
            run.pop("stdout")
    installed_cpu = quantiles([r["cpu_s"] for r in resolve_installed])["median"]
    path_cpu = quantiles([r["cpu_s"] for r in resolve_path])["median"]
    result = {
        "load_average_at_start": load,
        "validate_table": {"rows": ROWS, "bytes": big_bytes,
                           "166k_rows": _summary(validate["166k"]), "1k_rows": _summary(validate["1k"])},
        "doctor_aiter_packages": {"packages": packages, **_summary(doctor)},
        "first_rmsnorm_resolve": {
            "installed": _summary(resolve_installed), "flyconfigs_path": _summary(resolve_path),
            "sources": sorted({r["inner_source"] for r in resolve_installed + resolve_path}),
            "path_over_installed_cpu": path_cpu / installed_cpu,
        },
    }
    path = write_result("check-costs", result, args.out)
    print(json.dumps(result, indent=2))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
