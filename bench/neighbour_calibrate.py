"""The paired rule's margin measured on each device's tunings in a folder: the tuner's noise
band and how a neighbour's paired advantage over the default carries to the key beside it
(``python -m bench.neighbour_vote --calibrate`` prints the same).

    python -m bench.neighbour_calibrate [--artifacts artifacts/sm90] [--kernel rmsnorm]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flyconfigs.registry import KernelDecl
from flyconfigs.registry.families.family import Family
from flyconfigs.registry.search.neighbourhood import config_token

if TYPE_CHECKING:
    from bench.neighbour_vote import Tuned

__all__ = ["calibrate", "main"]


def calibrate(spec: KernelDecl, tuned: list[Tuned]) -> dict[str, Any]:
    """The two parts of the paired rule's margin on one device's tunings: the noise band
    the tuner recorded (median over keys), and, for every pair of keys one step apart on
    one ordinal axis and every config both timed in finals with both keys' defaults, how
    the log advantage over the default at one key carried to the other (spread and how
    often the sign held, by size of the advantage)."""
    bands = [t.artifact.selection.noise_band for t in tuned if t.artifact.selection.noise_band is not None]
    defaults = spec.tunable_defaults
    by_exact: dict[tuple[Any, ...], list[Tuned]] = defaultdict(list)
    for t in tuned:
        by_exact[tuple(t.key.get(a.name) for a in spec.key_axes if not a.ordinal)].append(t)
    carried: list[tuple[float, float]] = []
    for group in by_exact.values():
        for a in group:
            for b in group:
                if a is b or (distance := Family.of_declaration(spec).distance(a.key, b.key)) is None or distance[0] > 1.0:
                    continue
                home = a.artifact.default.config if a.artifact.default is not None else None
                if home is None:
                    continue
                ta, tb = a.neighbour, b.neighbour
                if ta.timed_in(home) != "final" or tb.timed_in(home) != "final":
                    continue
                for config, _ in ta.timings:
                    if ta.timed_in(config) == "final" and tb.timed_in(config) == "final" and \
                            config_token(config, defaults) != config_token(home, defaults):
                        here = math.log(ta.time_of(config) / ta.time_of(home))  # type: ignore[operator]
                        there = math.log(tb.time_of(config) / tb.time_of(home))  # type: ignore[operator]
                        carried.append((here, there))
    bins = [(0.0, 0.005), (0.005, 0.01), (0.01, 0.02), (0.02, 0.03), (0.03, 0.05), (0.05, 1.0)]
    held = {}
    for lo, hi in bins:
        sel = [(h, t) for h, t in carried if lo <= -h < hi]
        held[f"{lo:.3f}-{hi:.3f}"] = {"pairs": len(sel), "still_faster": sum(t < 0 for _, t in sel),
                                      "faster_by_margin_lost": sum(t > 0.03 for _, t in sel)}
    errors = [abs(h - t) for h, t in carried]
    return {"noise_band_median": statistics.median(bands) if bands else None, "pairs": len(carried),
            "transfer_error_median": round(statistics.median(errors), 4) if errors else None,
            "advantage_held_by_size": held}


def main(argv: list[str] | None = None) -> int:
    """Print the calibration of every device's tunings of each kernel asked (default both)."""
    from bench.neighbour_vote import measured
    from flyconfigs.kernels.fused_add_rmsnorm import SPEC as FUSED
    from flyconfigs.kernels.rmsnorm import SPEC as RMSNORM

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", type=Path, default=Path(__file__).resolve().parents[1] / "artifacts" / "sm90")
    parser.add_argument("--kernel", action="append", choices=("rmsnorm", "fused_add_rmsnorm"))
    args = parser.parse_args(argv)
    specs: dict[str, KernelDecl] = {"rmsnorm": RMSNORM, "fused_add_rmsnorm": FUSED}
    for kernel in args.kernel or list(specs):
        for product, tuned in sorted(measured(args.artifacts, kernel, specs[kernel]).items()):
            print(kernel, product, json.dumps(calibrate(specs[kernel], tuned), indent=1), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
