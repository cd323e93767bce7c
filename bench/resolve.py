"""Resolve costs, measured in one run: a memo hit; the first resolve in a fresh process
with 20 installed data packages of 500 artifacts each (20 targets, and the worst case of
all 20 for the device's own target), with the number of times it lists the installed
distributions; and a bare ``importlib.metadata.entry_points()`` call in the same
environment as the yardstick.
``--against NAME=PYTHONPATH`` (repeatable; ``python -m bench.tree_at COMMIT DEST`` makes
one) times another commit's code in the same run, each fresh process of the two
interleaved, the memo hits ``--memo-rounds`` times each; the load average is recorded
before and after.  With ``--out FOLDER`` writes FOLDER/resolve.json.

    python -m bench.resolve [--packages 20] [--artifacts 500] [--runs 7] [--memo-rounds 3] [--against NAME=PYTHONPATH] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import add_against, compile_bytecode, quantiles, versions_of, write_result
from tests.distributions import install_data_package
from tests.factories import H200, make_artifact

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}

FIRST_RESOLVE = """
import sys, time, json
from importlib import metadata
listed, scans = metadata.distributions, []
def counting(**kwargs):
    scans.append(sys._getframe(1).f_globals.get("__name__", "?"))  # the module that lists them
    return listed(**kwargs)
metadata.distributions = counting  # how many times the installed distributions are listed
t0 = time.perf_counter()
import flyconfigs
t1 = time.perf_counter()
before = len(scans)
r = flyconfigs.resolve("rmsnorm", {key}, device="sm90:132:NVIDIA H200")
t2 = time.perf_counter()
resolve_scans = {{name: scans[before:].count(name) for name in sorted(set(scans[before:]))}}
metadata.distributions = listed
assert r.source == "package", r
t3 = time.perf_counter()
metadata.entry_points()
t4 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "first_resolve_s": t2 - t1, "entry_points_s": t4 - t3,
                  "distribution_scans": resolve_scans}}))
"""

MEMO_HITS = """
import json, time
import flyconfigs
from flyconfigs.registry import DeviceQuery
key = {key}
flyconfigs.resolve("rmsnorm", key, device="sm90:132:NVIDIA H200")
device = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())
flyconfigs.resolve("rmsnorm", key, device=device)
hits, empty = [], []
for _ in range(200):
    start = time.perf_counter()
    for _ in range(1000):
        flyconfigs.resolve("rmsnorm", key, device=device)
    hits.append((time.perf_counter() - start) / 1000 * 1e6)
# The yardstick: a bare dict lookup of a tuple of the same size.
lookup = {{("rmsnorm", device, *key.items()): 1}}
for _ in range(200):
    start = time.perf_counter()
    for _ in range(1000):
        lookup.get(("rmsnorm", device, *key.items()))
    empty.append((time.perf_counter() - start) / 1000 * 1e6)
print(json.dumps({{"hits": hits, "empty": empty}}))
"""

TARGETS = [
    "sm90", "gfx942", "gfx950", "gfx90a", "gfx908", "gfx906", "gfx1030", "gfx1100", "gfx1101", "gfx1200",
    "gfx1201", "sm70", "sm75", "sm80", "sm86", "sm87", "sm89", "sm100", "sm120", "sm72",
]


def _populate(site: Path, packages: int, artifacts: int, same_target: bool) -> None:
    """``packages`` data packages of ``artifacts`` each: one per target (what a host
    with several vendors' packages has), or all for sm90 (the worst case)."""
    base = make_artifact(n_candidates=8)
    for p in range(packages):
        target = "sm90" if same_target else TARGETS[p % len(TARGETS)]
        vendor = "nvidia" if target.startswith("sm") else "amd"
        arts = []
        for i in range(artifacts):
            data = base.model_dump(mode="json")
            data["key"] = {**KEY, "M": 1 + i + p * artifacts}
            data["device"] = {**H200, "vendor": vendor, "arch": target, "compute_units": 132 if p == 0 else 100 + p}
            arts.append(type(base).model_validate(data))
        install_data_package(site, target, arts, name=f"flyconfigs-{target}-part{p:02d}", module=f"flyconfigs_{target}_part{p:02d}")


def _env(site: Path, code: str = "") -> dict[str, str]:
    """The environment of a process that has the packages of ``site`` installed (and
    imports flyconfigs from ``code`` first, when given)."""
    path = [code] if code else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(site), os.environ.get("PYTHONPATH", "")]),
           "FLYCONFIGS_NO_GPU_DETECT": "1"}
    env.pop("FLYCONFIGS_PATH", None)
    return env


def _cwd(code: str) -> str | None:
    """Where a version's processes start: ``python -c`` puts its folder first on the
    path, so another commit's start in its installed layout, never in this checkout."""
    return code.split(os.pathsep)[0] if code else None


def _first_resolves(site: Path, runs: int, versions: dict[str, str]) -> dict[str, list[dict[str, float]]]:
    """``runs`` fresh processes of each version, the versions interleaved."""
    code = FIRST_RESOLVE.format(key=repr({**KEY, "M": 1}))
    found: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
    for _ in range(runs):
        for name, path in versions.items():
            found[name].append(json.loads(subprocess.run([sys.executable, "-c", code], env=_env(site, path), cwd=_cwd(path),
                                                         capture_output=True, text=True, check=True).stdout))
    return found


def _memo_hits(site: Path, rounds: int, versions: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    """The memo-hit loop in ``rounds`` processes of each version, interleaved."""
    found: dict[str, dict[str, list[float]]] = {name: {"hits": [], "empty": []} for name in versions}
    for _ in range(rounds):
        for name, path in versions.items():
            # In a process of its own, with the packages on its path as an install puts them.
            memo = json.loads(subprocess.run([sys.executable, "-c", MEMO_HITS.format(key=repr(KEY))], env=_env(site, path),
                                             cwd=_cwd(path), capture_output=True, text=True, check=True).stdout)
            found[name]["hits"] += memo["hits"]
            found[name]["empty"] += memo["empty"]
    return found


def _figures(hits: dict[str, list[float]], runs: list[dict[str, float]], worst: list[dict[str, float]]) -> dict[str, Any]:
    return {
        "memo_hit_us": quantiles(hits["hits"]),
        "bare_dict_lookup_same_key_us": quantiles(hits["empty"]),
        "fresh_process_first_resolve_ms": quantiles([r["first_resolve_s"] * 1e3 for r in runs]),
        "fresh_process_first_resolve_all_same_target_ms": quantiles([r["first_resolve_s"] * 1e3 for r in worst]),
        "fresh_process_import_flyconfigs_ms": quantiles([r["import_s"] * 1e3 for r in runs]),
        "entry_points_call_ms": quantiles([r["entry_points_s"] * 1e3 for r in runs]),
        # Listings of the installed distributions (importlib.metadata.distributions()) in
        # the first resolve, the device given, by the module that made them: every count seen.
        "first_resolve_distribution_scans": {name: sorted({r["distribution_scans"].get(name, 0) for r in runs})
                                             for name in sorted({n for r in runs for n in r["distribution_scans"]})},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--packages", type=int, default=20)
    parser.add_argument("--artifacts", type=int, default=500)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--memo-rounds", type=int, default=1, help="processes timing the memo hit, per version")
    add_against(parser)
    parser.add_argument("--out", type=Path, help="folder for resolve.json (default: print only)")
    args = parser.parse_args()
    versions = versions_of(parser, args.against)
    # Every version's modules compiled first, as an install leaves them (see compile_bytecode).
    bytecode = {name: compile_bytecode(Path(path.split(os.pathsep)[-1]) if path else Path(__file__).resolve().parent.parent)
                for name, path in versions.items()}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as worst_tmp:
        _populate(Path(worst_tmp), args.packages, args.artifacts, same_target=True)
        worst = _first_resolves(Path(worst_tmp), args.runs, versions)
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        _populate(site, args.packages, args.artifacts, same_target=False)
        runs = _first_resolves(site, args.runs, versions)
        memo = _memo_hits(site, args.memo_rounds, versions)
    result = {
        "packages": args.packages,
        "artifacts_per_package": args.artifacts,
        **_figures(memo["this"], runs["this"], worst["this"]),
        "bytecode_compiled": bytecode,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "targets": {"memo_hit_us": 1.0, "first_resolve_ms": 50.0},
    }
    if args.against:
        result["against"] = {name: _figures(memo[name], runs[name], worst[name])
                             for name, path in versions.items() if path}
    path = write_result("resolve", result, args.out) if args.out else "(not written: no --out)"
    for name in result.get("against", {}):
        other = result["against"][name]
        print(f"{name}: memo hit {other['memo_hit_us']['median']:.2f} us; first resolve "
              f"{other['fresh_process_first_resolve_ms']['median']:.1f} ms, all for one target "
              f"{other['fresh_process_first_resolve_all_same_target_ms']['median']:.1f} ms; "
              f"distribution scans {other['first_resolve_distribution_scans']}")
    print(
        f"memo hit {result['memo_hit_us']['median']:.2f} us (dict lookup of the same key {result['bare_dict_lookup_same_key_us']['median']:.2f} us); "
        f"first resolve {result['fresh_process_first_resolve_ms']['median']:.1f} ms with {args.packages}x{args.artifacts} artifacts "
        f"of {args.packages} targets, {result['fresh_process_first_resolve_all_same_target_ms']['median']:.1f} ms when all are for the device's target "
        f"(import {result['fresh_process_import_flyconfigs_ms']['median']:.1f} ms); entry_points() {result['entry_points_call_ms']['median']:.1f} ms; "
        f"distribution scans {result['first_resolve_distribution_scans']} -> {path}"
    )


if __name__ == "__main__":
    main()
