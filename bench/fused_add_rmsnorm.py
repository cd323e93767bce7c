"""Fused residual add + RMSNorm on one GPU: the flyconfigs Triton op (served from the
registry, and its default config) against torch.compile of the two-op composite, the
eager pair, the unfused pair with Liger's RMSNorm after a torch add, Liger's own fused
add + RMSNorm, and quack's RMSNorm with its residual (``rmsnorm_fwd(x, w, residual=r)``,
when ``--quack-site`` names the folder its wheels were installed into), all in one run.
"Best peer" is the fastest of torch.compile, Liger's two and quack per shape; a peer
that raises on a shape is left out there (named under the row's ``excluded``).

Protocol (the tuner's): K calls over rotated input copies (at least 3× L2 where memory
allows) captured in one CUDA graph, contenders' replays interleaved, per-call time =
replay time / K, median of samples.  Every contender is checked against the float64
reference (and the residual against a torch add) before it is timed.  Every contender
allocates what it writes, and the outputs of all are treated alike (``--outputs``, as in
``bench.rmsnorm``).

    python -m bench.fused_add_rmsnorm --out FILE [--quick] [--grid models --grid unseen] [--quack-site DIR]

``--grid`` takes the family's presets or key grids, as ``flyconfigs tune --key-grid``
does (default: the grid below).  The summary gives the geometric means of the ratios,
the lowest speed-up over the best peer and how many shapes are below 0.95× of it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.common import OUTPUTS, timed, write_graph_run
from flyconfigs.gpu import get_backend
from flyconfigs.kernels import fused_add_rms_norm
from flyconfigs.kernels.fused_add_rmsnorm import SPEC, reference_fused_add_rms_norm, traffic_bytes
from flyconfigs.kernels.fused_add_rmsnorm.op import launch
from flyconfigs.kernels.torch_dtypes import TORCH_DTYPES
from flyconfigs.registry import DeviceQuery, resolve
from flyconfigs.tuner.grid import parse_grids
from flyconfigs.tuner.timing import TimingPlan, measure, plan_rotation, summarize

DT = TORCH_DTYPES
EPS = 1e-6
PEERS = ("torch.compile", "liger-unfused", "liger-fused", "quack")


def grid(quick: bool, grids: list[str] | None = None) -> list[tuple[int, int, str, str]]:
    """The shapes of ``grids`` (the family's presets or key grids), each once; by default
    the ``perf`` preset: bf16 over hidden sizes of popular models × row counts, plus fp16
    and an fp32 weight."""
    keys = parse_grids(grids or ["perf"], SPEC)
    shapes = list(dict.fromkeys((int(k["M"]), int(k["N"]), str(k["dtype"]), str(k["weight_dtype"])) for k in keys))
    if quick:
        shapes = ([s for s in shapes if s[1] in (1024, 4096, 16384) and s[0] in (1, 4096, 65536)] or shapes)[:6]
    return shapes


def _composite() -> Callable[..., torch.Tensor]:
    def composite(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        r.add_(x)
        return F.rms_norm(r, (r.shape[-1],), w, EPS)

    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 1024
    return torch.compile(composite, dynamic=False)


def _liger() -> tuple[Any, Any]:
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except ImportError:
        return None, None
    return LigerRMSNormFunction, LigerFusedAddRMSNormFunction


def _quack(site: Path | None) -> Callable[..., Any] | None:
    """quack's RMSNorm forward with a residual, from ``site`` (a folder its wheels were
    installed into with ``--target``: its ``.pth`` file must run, so it is added as a site
    directory).  quack 0.6.5's ``rmsnorm_fwd(x, weight, bias=None, residual=None, …, eps)``
    returns ``(out, residual_out, rstd)``: ``residual_out`` = x + residual in a new tensor
    of the residual's dtype (not in place), ``out`` its RMSNorm."""
    import site as site_module

    if site is None:
        return None
    site_module.addsitedir(str(site))
    try:
        from quack.rmsnorm import rmsnorm_fwd
    except ImportError as exc:
        print(f"quack is not importable ({exc}); it is left out", file=sys.stderr)
        return None
    return lambda x, r, w: rmsnorm_fwd(x, w, residual=r, eps=EPS)[:2]


NOT_IN_PLACE = ("liger-fused", "quack")
"""Peers that return ``(y, x + residual)`` in new tensors instead of updating the residual."""


def contenders_for(m: int, n: int, dtype: str, wdtype: str, copies: int, compiled: Any,
                   liger: tuple[Any, Any], quack: Callable[..., Any] | None = None,
                   ) -> tuple[dict[str, Callable[[int], Any]], dict[str, Any]]:
    """Launch functions over ``copies`` rotated inputs (each checked once), and what was
    served; a peer that raises on its check is left out, named under ``excluded``."""
    g = torch.Generator(device="cuda").manual_seed(m * 131 + n)
    xs = [(torch.randn(m, n, device="cuda", generator=g) * 0.01).to(DT[dtype]) for _ in range(copies)]
    rs = [torch.randn(m, n, device="cuda", generator=g).to(DT[dtype]) for _ in range(copies)]
    w = (torch.rand(n, device="cuda", generator=g) + 0.5).to(DT[wdtype])
    key = {"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype}
    device = DeviceQuery.of(get_backend().device().identity)
    default = SPEC.default_config(key, device)
    rms, fused = liger

    def launch_default(i: int, y: torch.Tensor | None = None) -> torch.Tensor:
        y = torch.empty_like(xs[i]) if y is None else y
        launch(xs[i], rs[i], w, y, EPS, default)
        return y

    # Every contender allocates what it writes and returns it, so that timed() treats
    # every contender's outputs alike.
    runs: dict[str, Callable[[int], Any]] = {
        "copy": lambda i: torch.mul(xs[i], 1.0),
        "flyconfigs": lambda i: fused_add_rms_norm(xs[i], rs[i], w, EPS),
        "flyconfigs-default": launch_default,
        "eager": lambda i: F.rms_norm(rs[i].add_(xs[i]), (n,), w, EPS),
        "torch.compile": lambda i: compiled(xs[i], rs[i], w),
    }
    if rms is not None:
        runs["liger-unfused"] = lambda i: rms.apply(rs[i].add_(xs[i]), w, EPS)
        # Liger's fused op is not in place: it returns (y, x + residual) in new tensors.
        runs["liger-fused"] = lambda i: fused.apply(xs[i], rs[i], w, EPS)
    if quack is not None:
        runs["quack"] = lambda i: quack(xs[i], rs[i], w)
    excluded: dict[str, str] = {}
    for name, run in list(runs.items()):
        if name == "copy":
            continue
        start = rs[0].clone()
        # The op and its default write into a NaN-filled tensor, so that one which
        # writes nothing cannot pass on memory another left behind.
        if name == "flyconfigs":
            result = fused_add_rms_norm(xs[0], rs[0], w, EPS, out=torch.full_like(xs[0], float("nan")))
        elif name == "flyconfigs-default":
            result = launch_default(0, torch.full_like(xs[0], float("nan")))
        elif name in PEERS:
            try:
                result = run(0)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - a peer that cannot run a shape is no peer there, and says why
                excluded[name] = f"raised {type(exc).__name__}: {str(exc)[:300]}"
                del runs[name]
                rs[0].copy_(start)
                continue
        else:
            result = run(0)
        torch.cuda.synchronize()
        expected_r, expected_y = reference_fused_add_rms_norm(xs[0], start, w, EPS)
        if name in NOT_IN_PLACE:
            y, r_after = result
        else:
            y, r_after = result, rs[0]
        tol = {"bf16": 2e-2, "fp16": 4e-3, "fp32": 1e-4}[dtype]
        err = ((y.double() - expected_y).abs().max() / expected_y.abs().max()).item()
        r_err = ((r_after.double() - expected_r.double()).abs().max()).item()
        if not err < tol or torch.isnan(y).any() or r_err > 1e-2 * float(expected_r.double().abs().max()):
            raise SystemExit(f"{name} is wrong on {key}: relative error {err}, residual error {r_err}")
        if name not in NOT_IN_PLACE:
            rs[0].copy_(start)
    served = resolve(SPEC, key, device)
    info = {"served_config": dict(served.config), "served_from": served.source, "served_origin": served.origin,
            "served_key_match": served.key_match, "default_config": default,
            **({"excluded": excluded} if excluded else {})}
    return runs, info


def row_ratios(row: dict[str, Any]) -> dict[str, float]:
    """The op's and its default's speed-ups over the fastest peer the row timed (its
    ``best_peer``) and over torch.compile, and their fractions of the copy, for one row."""
    res, best = row["results"], row.get("best_peer")
    ratios: dict[str, float] = {}
    for mine in ("flyconfigs", "flyconfigs-default"):
        if mine not in res:
            continue
        if best is not None:
            ratios[f"{mine}_speedup_vs_best_peer"] = res[best]["median_us"] / res[mine]["median_us"]
        if "torch.compile" in res:
            ratios[f"{mine}_speedup_vs_torch.compile"] = res["torch.compile"]["median_us"] / res[mine]["median_us"]
        if "copy" in res:
            ratios[f"{mine}_fraction_of_copy"] = res[mine]["bandwidth_gbps"] / res["copy"]["bandwidth_gbps"]
    return ratios


def best_peer(results: dict[str, Any]) -> str | None:
    """The fastest peer among ``results`` (contender → figures), or ``None``."""
    peers = [p for p in PEERS if p in results]
    return min(peers, key=lambda p: results[p]["median_us"]) if peers else None


def run_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the issue's goal reads from a run: the geometric mean of each speed-up over
    the rows (``flyconfigs_speedup_vs_best_peer`` is the op against the best peer), the
    lowest speed-up over the best peer and its shape, how many shapes are below 0.95×
    of it, where the served configs came from and which peers were left out where."""
    def geomean(key: str) -> float | None:
        vals = [r["ratios"][key] for r in rows if key in r["ratios"]]
        return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None

    keys = sorted({k for r in rows for k in r["ratios"] if not k.endswith("fraction_of_copy")})
    summary: dict[str, Any] = {k: geomean(k) for k in keys}
    versus = [(r["ratios"]["flyconfigs_speedup_vs_best_peer"], r) for r in rows
              if "flyconfigs_speedup_vs_best_peer" in r["ratios"]]
    worst = min(versus, key=lambda v: v[0], default=None)
    summary["min_speedup_vs_best_peer"] = None if worst is None else worst[0]
    summary["worst_shape"] = None if worst is None else {k: worst[1][k] for k in ("M", "N", "dtype", "weight_dtype")}
    summary["shapes_below_0.95_of_best_peer"] = sum(v < 0.95 for v, _ in versus)
    summary["shapes"] = len(rows)
    summary["served_from"] = sorted({r["served_from"] for r in rows})
    excluded = Counter(f"{name}: {why}" for r in rows for name, why in r.get("excluded", {}).items())
    if excluded:
        summary["excluded"] = dict(sorted(excluded.items()))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="a few shapes only")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--outputs", choices=sorted(OUTPUTS), default="kept",
                        help="; ".join(f"{k}: {v}" for k, v in OUTPUTS.items()) + " (default kept)")
    parser.add_argument("--grid", action="append", help="a preset or key grid of the family (repeatable; "
                                                          "default the grid in this module)")
    parser.add_argument("--quack-site", type=Path, help="the folder quack's wheels were installed into (--target)")
    args = parser.parse_args()
    compiled = _composite()
    liger = _liger()
    quack = _quack(args.quack_site)
    props = torch.cuda.get_device_properties(0)
    device = get_backend().device()
    rows: list[dict[str, Any]] = []
    outputs = {"outputs": args.outputs, "outputs_means": OUTPUTS[args.outputs]}
    started = time.time()
    for m, n, dtype, wdtype in grid(args.quick, args.grid):
        traffic = traffic_bytes(m, n, dtype, wdtype)
        rotation = plan_rotation(traffic, props.L2_cache_size, memory_budget=16 << 30)
        plan = TimingPlan(rotation.copies, rotation.launches, samples=args.samples)
        calls, info = contenders_for(m, n, dtype, wdtype, plan.copies, compiled, liger, quack)
        runs, kept = timed(calls, plan.copies, args.outputs)
        names = list(runs)
        results = measure([runs[k] for k in names], plan)
        del calls, runs, kept
        res = {k: summarize(r, traffic) for k, r in zip(names, results, strict=True)}
        res["copy"] = summarize(results[names.index("copy")], 2 * m * n * DT[dtype].itemsize)
        row: dict[str, Any] = {"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype, "traffic_bytes": traffic,
                               "copies": plan.copies, "launches_per_replay": plan.launches, "best_peer": best_peer(res),
                               **info, "results": res}
        row["ratios"] = row_ratios(row)
        rows.append(row)
        line = "  ".join(f"{k} {v['median_us']:8.2f}us" for k, v in res.items())
        versus = row["ratios"].get("flyconfigs_speedup_vs_best_peer", float("nan"))
        print(f"{m:>6} x {n:<6} {dtype}/{wdtype}: {line}  vs best ({row['best_peer']}) {versus:.3f}", flush=True)
        torch.cuda.empty_cache()
        write_graph_run(args.out, "fused-add-rmsnorm", rows, device, started, None, outputs)

    summary = run_summary(rows)
    write_graph_run(args.out, "fused-add-rmsnorm", rows, device, started, summary, outputs)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
