"""RMSNorm on one GPU, every contender in one run with the timing protocol of flyconfigs.tuner.timing
(K calls over rotated input copies captured in a graph, interleaved replays, median and
p20/p80): the device copy, an empty kernel, the flyconfigs op as served (tuned configs
through installed data packages), the op with its default, torch ``F.rms_norm``,
torch.compile of the same expression, Liger and quack (each when importable; quack from
``--quack-site``).  Each contender's output is checked
against a float64 reference before it is timed.  Writes ``--out`` (JSON).

Every contender allocates its output, and the outputs of all are treated alike
(``--outputs``): kept, by default, so that each timed call writes memory of its own as
the copy does; or dropped, so that the next call writes the same memory again.

    python -m bench.rmsnorm --out bench/results/rmsnorm-h200.json [--quick] [--contenders ...]

``--config JSON`` (repeatable) times that config of the op's kernel beside the others, as
contender ``config-1``, ``config-2``, … in the order given, on every shape where the spec
accepts it for the key and this device (the row lists the configs under ``configs`` and
why any was refused under ``refused_configs``); launched as the default is, through the
kernel directly.  These contenders are diagnostics: never peers, never in the summary.

A contender found not to have run as meant on a row (say, torch.compile falling back to
the uncompiled expression) is named under that row's ``excluded`` with the reason, and
``--resummarize`` recomputes the ratios and the summary without it there.
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

from bench.common import OUTPUTS, accepted_configs, machine, timed, write_graph_run
from flyconfigs.gpu import get_backend
from flyconfigs.kernels import rms_norm
from flyconfigs.kernels.rmsnorm import SPEC, reference_rms_norm, traffic_bytes
from flyconfigs.kernels.rmsnorm.op import kernel_for
from flyconfigs.kernels.torch_dtypes import TORCH_DTYPES
from flyconfigs.registry import DeviceQuery, resolve
from flyconfigs.tuner.grid import parse_grids
from flyconfigs.tuner.timing import measure, plan_rotation, summarize

DT = TORCH_DTYPES
EPS = 1e-6
PEERS = ("torch.compile", "liger", "quack")
EMPTY = 'extern "C" __global__ void empty_kernel() {}'
"""The floor of a launch under graph replay: one block of one thread doing nothing."""


def grid(quick: bool, grids: list[str] | None = None) -> list[tuple[int, int, str, str]]:
    """The shapes of ``grids`` (presets or key grids, as ``flyconfigs tune --key-grid``
    takes them; default the benchmark grid, the preset ``perf``), each once."""
    keys = parse_grids(grids or ["perf"], SPEC)
    shapes = list(dict.fromkeys((int(k["M"]), int(k["N"]), str(k["dtype"]), str(k["weight_dtype"])) for k in keys))
    if quick:
        shapes = [s for s in shapes if (s[0], s[1]) in {(1, 4096), (128, 8192), (4096, 4096), (65536, 16384)} or s[2] != "bf16"][:8]
    return shapes


def _compiled_expression() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """torch.compile of the expression, made afresh for each shape after a reset of
    dynamo: one function recompiled for hundreds of shapes hits dynamo's recompile limit
    and then runs uncompiled."""
    def expr(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)

    import torch._dynamo

    torch._dynamo.reset()
    return torch.compile(expr, dynamic=False)


def _liger() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None:
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except ImportError:
        return None
    return lambda x, w: LigerRMSNormFunction.apply(x, w, EPS)


def _quack(site: Path | None) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None:
    """quack's RMSNorm forward, from ``site`` (a folder its wheels were installed into
    with ``--target``: its ``.pth`` file must run, so it is added as a site directory)."""
    import site as site_module

    if site is not None:
        site_module.addsitedir(str(site))
    try:
        from quack.rmsnorm import rmsnorm_fwd
    except ImportError as exc:
        print(f"quack is not importable ({exc}); it is left out", file=sys.stderr)
        return None
    return lambda x, w: rmsnorm_fwd(x, w, eps=EPS)[0]


def _empty_kernel() -> Callable[[], None]:
    from flyconfigs.gpu import CompileRequest

    backend = get_backend()
    launch = backend.load(backend.compile(CompileRequest(EMPTY, "empty_kernel")), ()).prepare((1, 1, 1), (1, 1, 1))
    return lambda: launch((), torch.cuda.current_stream().cuda_stream)


TOLERANCE = {"bf16": 2e-2, "fp16": 4e-3, "fp32": 1e-4}
"""The largest relative error against the float64 reference a result of each dtype may show."""


def relative_error(y: torch.Tensor, reference: torch.Tensor) -> float:
    """``y``'s largest deviation from ``reference``, relative to the reference's largest value."""
    return ((y.double() - reference).abs().max() / reference.abs().max()).item()


def launcher(kernel: Any, config: dict[str, Any], xs: list[torch.Tensor],
             w: torch.Tensor) -> Callable[..., torch.Tensor]:
    """``call(i, y=None)``: ``kernel`` (built for ``config``) normalizes ``xs[i]`` with ``w``
    on the current stream into ``y``, or into a tensor it allocates, and returns it."""
    m, n = xs[0].shape
    grid, block, shared = SPEC.grid(config, m)

    def call(i: int, y: torch.Tensor | None = None) -> torch.Tensor:
        y = torch.empty_like(xs[i]) if y is None else y
        kernel.launch(grid, block, (xs[i], w, y, m, n, n, EPS), torch.cuda.current_stream().cuda_stream, shared)
        return y

    return call


def contenders_for(
    m: int, n: int, dtype: str, wdtype: str, copies: int, wanted: set[str], compiled: Any, liger: Any,
    quack: Any = None, empty: Callable[[], None] | None = None, configs: tuple[dict[str, Any], ...] = (),
) -> tuple[dict[str, Callable[[int], torch.Tensor | None]], dict[str, Any]]:
    """Calls over ``copies`` rotated inputs, each returning the output it allocated (the
    empty kernel: None), and what was served.  Every contender allocates its output the
    same way, so :func:`timed` can treat every contender's outputs alike.  Each is checked
    against a float64 reference first; the op and its default into a NaN-filled tensor,
    so that one which writes nothing cannot pass on memory another left behind."""
    xs = [torch.randn(m, n, device="cuda").mul_(2).to(DT[dtype]) for _ in range(copies)]
    w = (torch.rand(n, device="cuda") + 0.5).to(DT[wdtype])
    backend = get_backend()
    key = {"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype}
    device = DeviceQuery.of(backend.device().identity)
    default = SPEC.default_config(key, device)
    launch_default = launcher(kernel_for(backend, default, key), default, xs, w)

    calls: dict[str, Callable[[int], torch.Tensor | None]] = {
        "copy": lambda i: torch.mul(xs[i], 1.0),
        "flyconfigs": lambda i: rms_norm(xs[i], w, EPS),
        "flyconfigs-default": launch_default,
        "F.rms_norm": lambda i: F.rms_norm(xs[i], (n,), w, EPS),
    }
    if compiled is not None:
        calls["torch.compile"] = lambda i: compiled(xs[i], w)
    if liger is not None:
        calls["liger"] = lambda i: liger(xs[i], w)
    if quack is not None:
        calls["quack"] = lambda i: quack(xs[i], w)
    if empty is not None:
        calls["empty"] = lambda i: empty()
    calls = {k: v for k, v in calls.items() if k in wanted}
    named, refused = accepted_configs(list(configs), key, device)
    forced = {name: launcher(kernel_for(backend, config, key), config, xs, w) for name, config in named.items()}
    calls.update(forced)

    served = resolve(SPEC, key, device)
    info = {"served_config": dict(served.config), "served_from": served.source, "served_origin": served.origin,
            "served_key_match": served.key_match, "default_config": default,
            **({"configs": named} if named else {}), **({"refused_configs": refused} if refused else {})}
    ref = reference_rms_norm(xs[0], w, EPS)
    launched = {"flyconfigs-default": launch_default, **forced}  # through the kernel: checked into a NaN-filled y
    for name, call in calls.items():
        if name in ("copy", "empty"):
            continue
        if name == "flyconfigs":
            y = rms_norm(xs[0], w, EPS, out=torch.full_like(xs[0], float("nan")))
        elif name in launched:
            y = launched[name](0, torch.full_like(xs[0], float("nan")))
        else:
            y = call(0)
        torch.cuda.synchronize()
        assert y is not None
        err = relative_error(y, ref)
        if not err < TOLERANCE[dtype] or torch.isnan(y).any():
            raise SystemExit(f"{name} is wrong on {key}: max relative error {err}")
    return calls, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="a few shapes only")
    parser.add_argument("--contenders", nargs="*",
                        default=["copy", "empty", "flyconfigs", "flyconfigs-default", "F.rms_norm", *PEERS])
    parser.add_argument("--quack-site", type=Path, help="the folder quack's wheels were installed into (--target)")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--config", action="append", default=[], type=json.loads,
                        help="a config of the op (JSON) to time beside the others (repeatable; a diagnostic)")
    parser.add_argument("--outputs", choices=sorted(OUTPUTS), default="kept",
                        help="; ".join(f"{k}: {v}" for k, v in OUTPUTS.items()) + " (default kept)")
    parser.add_argument("--grid", action="append", help="a preset or key grid (repeatable; default perf)")
    parser.add_argument("--resummarize", action="store_true",
                        help="recompute the ratios and the summary of the result in --out (its rows' "
                             "'excluded' contenders left out as peers) without running anything")
    parser.add_argument("--resume", action="store_true",
                        help="continue the unfinished run in --out: its rows are kept and only the shapes "
                             "it lacks are timed; the result lists each process under 'segments'")
    args = parser.parse_args()
    if args.resummarize:
        data = json.loads(args.out.read_text())
        for row in data["rows"]:
            row["ratios"] = row_ratios(row)
        data["summary"] = run_summary(data["rows"])
        args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(json.dumps(data["summary"], indent=1))
        return
    wanted = set(args.contenders)
    liger = _liger() if "liger" in wanted else None
    quack = _quack(args.quack_site) if "quack" in wanted else None
    empty = _empty_kernel() if "empty" in wanted else None
    props = torch.cuda.get_device_properties(0)
    device = get_backend().device()
    rows, segments = [], []
    if args.resume and args.out.exists():
        earlier = json.loads(args.out.read_text())
        if earlier.get("complete") or earlier.get("outputs") != args.outputs:
            raise SystemExit(f"{args.out}: --resume continues an unfinished run with --outputs {args.outputs}")
        rows = earlier["rows"]
        segments = earlier.get("segments") or [{"machine": earlier["machine"], "rows": len(rows), "wall_s": earlier["wall_s"]}]
    done = {(r["M"], r["N"], r["dtype"], r["weight_dtype"]) for r in rows}
    started = time.time()
    segments.append({"machine": machine(), "rows": 0, "wall_s": 0.0})
    outputs = {"outputs": args.outputs, "outputs_means": OUTPUTS[args.outputs], "segments": segments}
    for m, n, dtype, wdtype in grid(args.quick, args.grid):
        if (m, n, dtype, wdtype) in done:
            continue
        traffic = traffic_bytes(m, n, dtype, wdtype)
        plan = plan_rotation(traffic, props.L2_cache_size, memory_budget=16 << 30)
        plan = type(plan)(plan.copies, plan.launches, samples=args.samples)
        compiled = _compiled_expression() if "torch.compile" in wanted else None
        calls, info = contenders_for(m, n, dtype, wdtype, plan.copies, wanted, compiled, liger, quack, empty,
                                     tuple(args.config))
        runs, kept = timed(calls, plan.copies, args.outputs)
        names = list(runs)
        results = measure([runs[k] for k in names], plan)
        del calls, runs, kept
        row: dict[str, Any] = {"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype, "traffic_bytes": traffic,
                               "copies": plan.copies, "launches_per_replay": plan.launches, **info,
                               "results": {k: summarize(r, traffic) for k, r in zip(names, results)}}
        row["ratios"] = row_ratios(row)
        rows.append(row)
        segments[-1].update(rows=len(rows) - len(done), wall_s=time.time() - started)
        line = "  ".join(f"{k} {v['median_us']:8.2f}us" for k, v in row["results"].items())
        print(f"{m:>6} x {n:<6} {dtype}/{wdtype}: {line}", flush=True)
        torch.cuda.empty_cache()
        write_graph_run(args.out, "rmsnorm", rows, device, started, None, outputs)
    summary = run_summary(rows)
    write_graph_run(args.out, "rmsnorm", rows, device, started, summary, outputs)
    print(json.dumps(summary, indent=1))


def row_ratios(row: dict[str, Any]) -> dict[str, float]:
    """The op's and its default's speed-ups over ``F.rms_norm`` and over the fastest peer,
    and their fractions of the copy, for one row.  A contender the row lists under
    ``excluded`` (name: why) is no peer there."""
    res = {k: v for k, v in row["results"].items() if k not in row.get("excluded", {})}
    peers = [res[p]["median_us"] for p in PEERS if p in res]
    ratios: dict[str, float] = {}
    for mine in ("flyconfigs", "flyconfigs-default"):
        if mine not in res:
            continue
        if "F.rms_norm" in res:
            ratios[f"{mine}_speedup_vs_F.rms_norm"] = res["F.rms_norm"]["median_us"] / res[mine]["median_us"]
        if peers:
            ratios[f"{mine}_speedup_vs_best_peer"] = min(peers) / res[mine]["median_us"]
        if "copy" in res:
            ratios[f"{mine}_fraction_of_copy"] = res[mine]["bandwidth_gbps"] / res["copy"]["bandwidth_gbps"]
    return ratios


def run_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the Done-means of the RMSNorm issue read from a run: geometric means of the
    ratios, the worst ratio to the best peer, the shapes at 0.97 of it or above and those
    below (each named, worst first), the lowest fraction of the copy at >= 256 MB and
    how many of those shapes reach 0.97 of it, the most µs over the empty kernel at
    M <= 16, and how often the default is within 10% of served."""
    def geomean(key: str) -> float | None:
        vals = [r["ratios"][key] for r in rows if key in r["ratios"]]
        return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None

    summary: dict[str, Any] = {k: geomean(k) for k in (
        "flyconfigs_speedup_vs_F.rms_norm", "flyconfigs_speedup_vs_best_peer",
        "flyconfigs-default_speedup_vs_F.rms_norm", "flyconfigs-default_speedup_vs_best_peer")}
    big = [r for r in rows if r["traffic_bytes"] >= 256e6 and "flyconfigs_fraction_of_copy" in r["ratios"]]
    summary["min_fraction_of_copy_at_256MB_or_more"] = min((r["ratios"]["flyconfigs_fraction_of_copy"] for r in big), default=None)
    summary["shapes_at_256MB_or_more_at_least_0.97_of_copy"] = sum(r["ratios"]["flyconfigs_fraction_of_copy"] >= 0.97 for r in big)
    summary["shapes_at_256MB_or_more"] = len(big)
    versus = [r["ratios"]["flyconfigs_speedup_vs_best_peer"] for r in rows if "flyconfigs_speedup_vs_best_peer" in r["ratios"]]
    summary["min_speedup_vs_best_peer"] = min(versus, default=None)
    summary["shapes_at_least_0.97_of_best_peer"] = sum(v >= 0.97 for v in versus)
    below = sorted((r for r in rows if r["ratios"].get("flyconfigs_speedup_vs_best_peer", 1.0) < 0.97),
                   key=lambda r: r["ratios"]["flyconfigs_speedup_vs_best_peer"])
    summary["shapes_below_0.97_of_best_peer"] = len(below)
    summary["below_0.97_of_best_peer"] = [
        {**{k: r[k] for k in ("M", "N", "dtype", "weight_dtype")}, "speedup": r["ratios"]["flyconfigs_speedup_vs_best_peer"]}
        for r in below]
    summary["shapes"] = len(rows)
    small = [r["results"]["flyconfigs"]["median_us"] - r["results"]["empty"]["median_us"]
             for r in rows if r["M"] <= 16 and "empty" in r["results"] and "flyconfigs" in r["results"]]
    summary["max_us_over_empty_kernel_at_M_16_or_less"] = max(small, default=None)
    summary["shapes_at_M_16_or_less_within_0.8us_of_empty"] = sum(v <= 0.8 for v in small)
    summary["shapes_at_M_16_or_less"] = len(small)
    if rows and "flyconfigs" in rows[0]["results"] and "flyconfigs-default" in rows[0]["results"]:
        within = [r["results"]["flyconfigs-default"]["median_us"] <= 1.10 * r["results"]["flyconfigs"]["median_us"] for r in rows]
        summary["default_within_10pct_of_served_fraction"] = sum(within) / len(within)
    excluded = Counter(f"{name}: {why}" for r in rows for name, why in r.get("excluded", {}).items())
    if excluded:
        summary["excluded"] = dict(sorted(excluded.items()))
    return summary


if __name__ == "__main__":
    main()
