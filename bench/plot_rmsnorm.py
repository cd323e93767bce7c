"""Chart of a bench.rmsnorm result: bandwidth (GB/s, traffic 2·M·N·sizeof(x) +
N·sizeof(w) over the median time) of every contender for every shape, and the table the
README shows.

    python -m bench.plot_rmsnorm bench/results/rmsnorm-h200.json --png bench/results/rmsnorm-h200.png --markdown --perf-only

``--perf-only`` keeps the shapes of the benchmark grid (``PERF_GRID``).  A contender a row
excludes (see ``bench.rmsnorm``) is left out of the chart there and shown as "—".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ORDER = ["copy", "empty", "flyconfigs", "flyconfigs-default", "F.rms_norm", "torch.compile", "liger", "quack"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", type=Path)
    parser.add_argument("--png", type=Path)
    parser.add_argument("--markdown", action="store_true", help="print the README table")
    parser.add_argument("--perf-only", action="store_true", help="only the shapes of the benchmark grid")
    args = parser.parse_args()
    data = json.loads(args.result.read_text())
    rows = data["rows"]
    if args.perf_only:
        from flyconfigs.kernels.rmsnorm import PERF_GRID, SPEC
        from flyconfigs.tuner.grid import parse_grids

        perf = {(int(k["M"]), int(k["N"]), k["dtype"], k["weight_dtype"]) for k in parse_grids(list(PERF_GRID), SPEC)}
        rows = [r for r in rows if (r["M"], r["N"], r["dtype"], r["weight_dtype"]) in perf]
    names = [n for n in ORDER if n in rows[0]["results"]]
    labels = [f"{r['M']}x{r['N']}" + ("" if r["dtype"] == "bf16" else f" {r['dtype']}")
              + ("" if r["weight_dtype"] == r["dtype"] else f"/{r['weight_dtype']}") for r in rows]

    def value(r: dict, name: str, field: str) -> float:
        return float("nan") if name in r.get("excluded", {}) else r["results"][name][field]

    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(max(18, len(rows) * 0.1), 6.5))
        for name in (n for n in names if n != "empty"):  # it moves no bytes
            ax.plot(range(len(rows)), [value(r, name, "bandwidth_gbps") for r in rows], marker="o", ms=3,
                    lw=2.2 if name == "flyconfigs" else 1.1, label=name + (" (tuned, from flyconfigs-sm90)" if name == "flyconfigs" else ""))
        ax.set_xticks(range(len(rows)), labels, rotation=75, fontsize=7)
        ax.set_ylabel("GB/s (RMSNorm traffic / median time)")
        device = data["device"]["product"]
        ax.set_title(f"RMSNorm on {device}: bandwidth by shape (bf16 unless marked; graph replay, rotated inputs, median of 15)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)
    if args.markdown:
        print("| M × N (dtype) | " + " | ".join(names) + " | tuned / F.rms_norm | tuned / best peer |")
        print("|---|" + "---:|" * (len(names) + 2))
        for label, r in zip(labels, rows):
            cells = ["—" if n in r.get("excluded", {}) else f"{r['results'][n]['median_us']:.2f} µs"
                     if r["traffic_bytes"] < 64e6 or n == "empty" else f"{r['results'][n]['bandwidth_gbps']:,.0f} GB/s"
                     for n in names]
            ratios = r["ratios"]
            print(f"| {label} | " + " | ".join(cells) +
                  f" | {ratios['flyconfigs_speedup_vs_F.rms_norm']:.2f}× | {ratios['flyconfigs_speedup_vs_best_peer']:.2f}× |")


if __name__ == "__main__":
    main()
