"""Time to first result of a kernel under flyconfigs' drop-in for ``triton.autotune``,
with and without an artifact for its key (run on a GPU).

A row softmax decorated with ``flyconfigs.kernels.triton_autotune.autotune`` (eight
configs) is pip-installed as a distribution into a temporary folder and tuned for each key with
``flyconfigs tune`` (the GPU found).  Then each mode runs in ``--runs`` fresh processes,
each with an empty Triton cache, timing from before the kernel's module is imported to
the first call's output on the host (``torch.cuda.synchronize``):

- ``artifact``: the tuned artifacts on ``FLYCONFIGS_PATH``: the registry serves the
  config, nothing is searched, one variant is compiled;
- ``triton``: no artifact, ``fallback="triton"``: Triton's own autotune compiles and times
  every config first;
- ``default``: no artifact, ``fallback="default"``: the default runs, nothing searched.

    python -m bench.triton_autotune_first_call --out bench/results/triton-autotune-first-call-h100.json \\
        [--key 4096,8192 ...] [--runs 5]

``--dry-run`` checks the script on a CPU (Triton's interpreter, the test backend's
artifacts); its times mean nothing.
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

from bench.common import machine
from flyconfigs.tuner.simulated import SIMULATED_DEVICE

FAMILY = "bench_row_softmax"
MODULE = '''
import os
import statistics
import time
import torch
import triton
import triton.language as tl
from flyconfigs.kernels.triton_autotune import autotune

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (1024, 4096) for w in (2, 4, 8, 16)]


def host_bench(fn, quantiles):
    # Triton's interpreter (--dry-run) has no device timer.
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return [statistics.median(times)] * len(quantiles)


def inputs(key, device):
    x = torch.randn(key["n_rows"], key["n_cols"], device=device, dtype=torch.bfloat16)
    return {"Y": torch.empty_like(x), "X": x, "stride": x.stride(0), "n_rows": key["n_rows"], "n_cols": key["n_cols"]}


def reference(args):
    return {"Y": torch.softmax(args["X"].double(), dim=-1)}


@autotune(family="bench_row_softmax", configs=CONFIGS, key=["n_rows", "n_cols"],
          fallback=os.environ.get("BENCH_FALLBACK", "triton"), grid=lambda meta: (meta["n_rows"],),
          inputs=inputs, reference=reference,
          do_bench=host_bench if os.environ.get("TRITON_INTERPRET") == "1" else None)
@triton.jit
def softmax_kernel(Y, X, stride, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * stride
    top = tl.full([BLOCK], -float("inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        top = tl.maximum(top, tl.load(X + row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32))
    peak = tl.max(top, 0)
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.exp(tl.load(X + row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32) - peak)
    norm = tl.sum(total, 0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        tl.store(Y + row + cols, (tl.exp(x - peak) / norm).to(Y.dtype.element_ty), mask=cols < n_cols)
'''
FIRST_CALL = '''
import json, sys, time
start = time.perf_counter()
import torch
import bench_softmax
m, n, device = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
x = torch.randn(m, n, device=device, dtype=torch.bfloat16)
y = torch.empty_like(x)
sync()
made = time.perf_counter()
bench_softmax.softmax_kernel[(m,)](y, x, x.stride(0), m, n)
sync()
first = time.perf_counter()
bench_softmax.softmax_kernel[(m,)](y, x, x.stride(0), m, n)
sync()
second = time.perf_counter()
assert torch.allclose(y.double(), torch.softmax(x.double(), -1), atol=1e-2), "wrong softmax"
k = bench_softmax.softmax_kernel
print(json.dumps({"first_call_s": first - made, "to_first_result_s": first - start, "second_call_s": second - first,
                  "source": k.resolution.source if k.resolution else None, "searches": k.searches,
                  "config": str(k.best_config)}))
'''


PYPROJECT = f"""[build-system]
requires = ["setuptools>=70"]
build-backend = "setuptools.build_meta"

[project]
name = "bench-softmax"
version = "0.1.0"

[project.entry-points."flyconfigs.kernels"]
{FAMILY} = "bench_softmax:softmax_kernel.family"

[tool.setuptools]
py-modules = ["bench_softmax"]
"""


def _install(site: Path) -> None:
    """The kernel as a real distribution, pip-installed into ``site`` (offline)."""
    with tempfile.TemporaryDirectory(prefix="bench-softmax-src-") as src:
        (Path(src) / "bench_softmax.py").write_text(MODULE)
        (Path(src) / "pyproject.toml").write_text(PYPROJECT)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                        "--target", str(site), src], check=True)


def _env(site: Path, dry_run: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_")}
    # The installed kernel first; flyconfigs as this process imports it (the checkout's
    # root, where the benchmarks run from, or an install on PYTHONPATH).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)
    if dry_run:
        env["TRITON_INTERPRET"] = "1"
        env["FLYCONFIGS_DEVICE"] = json.dumps({k: SIMULATED_DEVICE[k] for k in ("vendor", "arch", "product", "compute_units")})
    return env


def _one(site: Path, mode: str, key: tuple[int, int], tuned: Path, dry_run: bool) -> dict[str, Any]:
    env = _env(site, dry_run)
    env["BENCH_FALLBACK"] = "default" if mode == "default" else "triton"
    if mode == "artifact":
        env["FLYCONFIGS_PATH"] = str(tuned)
    with tempfile.TemporaryDirectory(prefix="triton-cache-") as cache:
        env["TRITON_CACHE_DIR"] = cache  # every process compiles from nothing
        done = subprocess.run([sys.executable, "-c", FIRST_CALL, str(key[0]), str(key[1]), "cpu" if dry_run else "cuda"],
                              env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{mode} {key}: the first call failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _card() -> str:
    import torch

    return str(torch.cuda.get_device_name())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the JSON result file (under bench/results/)")
    parser.add_argument("--key", action="append", help="n_rows,n_cols (repeatable; default 4096,8192 and 1,4096)")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per mode and key (default 5)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the script on a CPU: Triton's interpreter and the test backend (times mean nothing)")
    args = parser.parse_args(argv)
    keys = [tuple(int(v) for v in k.split(",")) for k in (args.key or ["4096,8192", "1,4096"])]
    with tempfile.TemporaryDirectory(prefix="flyconfigs-bench-") as tmp:
        site, tuned = Path(tmp) / "site", Path(tmp) / "tuned"
        _install(site)
        grid = " ".join([f"n_rows={','.join(str(k[0]) for k in keys)}", f"n_cols={','.join(str(k[1]) for k in keys)}",
                         "dtype=bf16"])
        backend = ["--backend", "simulated"] if args.dry_run else []
        subprocess.run([sys.executable, "-m", "flyconfigs", "tune", FAMILY, "--key-grid", grid, "--out", str(tuned),
                        *backend], env=_env(site, args.dry_run), check=True)
        rows = []
        for key in keys:
            for mode in ("artifact", "triton", "default"):
                runs = [_one(site, mode, key, tuned, args.dry_run) for _ in range(args.runs)]
                rows.append({"key": {"n_rows": key[0], "n_cols": key[1], "dtype": "bf16"}, "mode": mode, "runs": runs,
                             "median_first_call_s": statistics.median(r["first_call_s"] for r in runs),
                             "median_to_first_result_s": statistics.median(r["to_first_result_s"] for r in runs)})
                print(f"{key} {mode}: first call {rows[-1]['median_first_call_s']:.3f} s (median of {args.runs})",
                      file=sys.stderr)
    card = "none (Triton's interpreter)" if args.dry_run else _card()
    result = {"benchmark": "triton-autotune-first-call", "machine": machine(), "device": card, "dry_run": args.dry_run,
              "configs": 8,
              "results": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
