"""The aiter corpus as packages, of record: its size against aiter's own CSVs, the first
resolve over it installed, and the round trip back to aiter's files.

The three folders ``imported/aiter-<arch>`` (``scripts/aiter_packages.py`` makes them from
``corpora/aiter-e4048607``) are published as wheels (``flyconfigs publish``'s
``publish_all``) and installed into a fresh site folder (each wheel's files unpacked, as
an installer lays them out).  Then, in a fresh interpreter each run, for every family the
first ``flyconfigs.resolve`` of a key of its largest table (the loader's own imports,
discovery, the manifests of that arch, the family's tables read and indexed, the search)
is timed, in wall time and in the process's CPU time (which other work on the machine
inflates less), and, in another fresh interpreter, the first resolve of the next size up
on the axis aiter pads (``M``, ``m`` or ``token``; a key between tuned ones or past them,
which takes the nearest-key steps); runs of the families are interleaved.  Last,
``flyconfigs export aiter`` from that install writes aiter's CSVs, compared with the
upstream files as aiter reads them.  And what the installed packages serve is checked
against aiter's own lookup over the CSVs (``tests/aiter_corpus.py``'s ``Reference``)
where aiter relaxes a key column: every fused-MoE row's shape asked with each activation
no row has for it (aiter retries with any activation), and every grouped-MoE row asked on
a GPU of a CU count no row has (aiter relaxes ``cu_num``).  With ``--out FOLDER`` writes
FOLDER/aiter-corpus.json.

    python -m bench.aiter_corpus [--runs 5] [--out bench/results]
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
from flyconfigs.kernels.aiter_gemm import FAMILIES, family_of
from flyconfigs.publish.build import publish_all
from flyconfigs.schema.table import Table
from tests.aiter_corpus import CORPUS, Reference, compare, tuned_files, upstream_path

ROOT = Path(__file__).resolve().parents[1]
IMPORTED = ROOT / "imported"

FIRST_RESOLVE = """
import json, time
t0 = time.perf_counter()
import flyconfigs
t1, c1 = time.perf_counter(), time.process_time()
r = flyconfigs.resolve({kernel!r}, {key!r}, device={device!r})
t2, c2 = time.perf_counter(), time.process_time()
assert r.source == "package" and dict(r.config) == {config!r}, r
print(json.dumps({{"import_s": t1 - t0, "first_resolve_s": t2 - t1, "first_resolve_cpu_s": c2 - c1}}))
"""

FIRST_RESOLVE_BETWEEN = """
import json, time
import flyconfigs
t1, c1 = time.perf_counter(), time.process_time()
r = flyconfigs.resolve({kernel!r}, {key!r}, device={device!r})
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({{"first_resolve_s": t2 - t1, "first_resolve_cpu_s": c2 - c1, "key_match": r.key_match}}))
"""


ACTIVATIONS = ("ActivationType.Silu", "ActivationType.Gelu", "ActivationType.Swiglu", "ActivationType.Situv2")
LOOKUP_CHECK = "import json; from bench.aiter_corpus import lookup_checks; print(json.dumps(lookup_checks()))"


def _relaxed_asks(kernel: str) -> list[tuple[dict[str, object], str, str]]:
    """(key, device, arch) asks that miss the asked key where aiter relaxes a column: each
    fused-MoE row's shape with each activation no row has for it; each grouped-MoE row
    on a GPU of its arch with 128 CUs, which no row has."""
    tables = [Table.model_validate_json(p.read_bytes()) for p in sorted(IMPORTED.glob(f"*/{kernel}-*.json"))]
    family = FAMILIES[kernel]
    tuned = {(t.device.arch, *(t.key_of(i)[c] for c in family.key)) for t in tables for i in range(len(t.rows))}
    asks = []
    for table in tables:
        d = table.device
        for i in range(len(table.rows)):
            key = {k: v for k, v in table.key_of(i).items() if k != "flydsl_fallback"}
            if kernel == "aiter_grouped_fmoe":
                asks.append(({**key, "cu_num": 128}, f"{d.arch}:128:AMD {d.arch}, 128 CUs", d.arch))
                continue
            for act in ACTIVATIONS:
                other = {**key, "act_type": act}
                if (d.arch, *(other[c] for c in family.key)) not in tuned:
                    asks.append((other, f"{d.arch}:{d.compute_units}:{d.product}", d.arch))
    return asks


def lookup_checks() -> dict[str, dict[str, object]]:
    """For the two families whose aiter lookup relaxes a column, what the installed
    packages serve (``flyconfigs.resolve``) against aiter's lookup over the CSVs: how many
    keys were asked, how many got a relaxed row (a nearest-key match that names the
    column), how many aiter's default path, and the first keys that differ."""
    import flyconfigs

    out: dict[str, dict[str, object]] = {}
    for kernel in ("aiter_fmoe", "aiter_grouped_fmoe"):
        family = FAMILIES[kernel]
        reference = Reference(family, [p for p in tuned_files() if family_of(p.name) is family])
        asks = _relaxed_asks(kernel)
        relaxed = default = 0
        differ: list[str] = []
        for key, device, arch in asks:
            served = flyconfigs.resolve(kernel, key, device=device)
            want = reference.config(arch, key)
            named = any("relaxed it" in r for r in served.reasons)
            if dict(served.config) != want or (want and (served.source != "package" or not named)):
                differ.append(f"{device} {key}: served {dict(served.config)} ({served.source}), aiter {want}")
            relaxed += bool(want) and served.key_match == "nearest" and named
            default += not want and served.source == "default"
        out[kernel] = {"asked": len(asks), "served_a_relaxed_row": relaxed, "aiters_default_path": default,
                       "differ": len(differ), "first_differences": differ[:3]}
    return out


def _asks() -> list[tuple[str, dict[str, object], str, dict[str, object], int]]:
    """For each family, a key of its largest table, the device, the config, the rows."""
    largest: dict[str, tuple[int, Table]] = {}
    for path in sorted(IMPORTED.glob("*/*.json")):
        table = Table.model_validate_json(path.read_bytes())
        size = len(table.rows)
        if table.kernel.name not in largest or size > largest[table.kernel.name][0]:
            largest[table.kernel.name] = (size, table)
    asks = []
    for kernel, (size, table) in sorted(largest.items()):
        d = table.device
        index = len(table.rows) // 2
        key = {k: v for k, v in table.key_of(index).items() if k != "flydsl_fallback"}
        asks.append((kernel, key, f"{d.arch}:{d.compute_units}:{d.product}", table.config_of(index), size))
    return asks


def _install(wheels: list[Path], site: Path) -> int:
    """Unpack ``wheels`` into ``site``; the bytes installed."""
    total = 0
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
            total += sum(info.file_size for info in archive.infolist())
    return total


def _run(code: str, env: dict[str, str], cwd: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, help="folder for aiter-corpus.json (default: print only)")
    args = parser.parse_args()
    csvs = tuned_files()
    csv_bytes = sum(p.stat().st_size for p in csvs)
    table_bytes = sum(p.stat().st_size for p in IMPORTED.glob("*/*.json"))
    asks = _asks()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    with tempfile.TemporaryDirectory() as tmp:
        releases = publish_all(IMPORTED, Path(tmp) / "dist")
        wheels = [f for r in releases for f in r.files if f.suffix == ".whl"]
        site = Path(tmp) / "site"
        installed = _install(wheels, site)
        env = {**os.environ, "FLYCONFIGS_NO_GPU_DETECT": "1",
               "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
        env.pop("FLYCONFIGS_PATH", None)
        runs: dict[str, list[dict[str, float]]] = {kernel: [] for kernel, *_ in asks}
        between: dict[str, list[dict[str, Any]]] = {kernel: [] for kernel, *_ in asks}
        for _ in range(args.runs):
            for kernel, key, device, config, _rows in asks:
                code = FIRST_RESOLVE.format(kernel=kernel, key=key, device=device, config=config)
                runs[kernel].append(_run(code, env, tmp))
                axis = FAMILIES[kernel].ordinal_axis
                if axis is not None:  # the next size up, between tuned keys or past them: aiter pads it
                    code = FIRST_RESOLVE_BETWEEN.format(kernel=kernel, key={**key, axis: key[axis] + 1}, device=device)
                    between[kernel].append(_run(code, env, tmp))
        lookups = _run(LOOKUP_CHECK, env, str(ROOT))
        out = Path(tmp) / "exported"
        done = subprocess.run([sys.executable, "-m", "flyconfigs", "export", "aiter", "--out", str(out), "--json"],
                              env=env, capture_output=True, text=True, cwd=tmp)
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        differences = {}
        for path in csvs:
            exported = out / upstream_path(path)
            left_out = (73,) if path.name == "tuned_grouped_fmoe.csv" else ()
            if exported.exists():
                found = compare(path, exported, left_out)
            else:
                found = [] if len(path.read_text().splitlines()) <= 1 else ["not exported"]
            if found:
                differences[upstream_path(path)] = found[:3]
        wheel_bytes = sum(w.stat().st_size for w in wheels)
    per_family: dict[str, dict[str, Any]] = {
        kernel: {"rows_of_table": rows,
                 "first_resolve_ms": quantiles([r["first_resolve_s"] * 1e3 for r in runs[kernel]]),
                 "first_resolve_cpu_ms": quantiles([r["first_resolve_cpu_s"] * 1e3 for r in runs[kernel]])}
        for kernel, _key, _device, _config, rows in asks}
    for kernel, found in between.items():
        if found:
            per_family[kernel]["next_size_up"] = {
                "key_match": sorted({r["key_match"] for r in found}),
                "first_resolve_ms": quantiles([r["first_resolve_s"] * 1e3 for r in found]),
                "first_resolve_cpu_ms": quantiles([r["first_resolve_cpu_s"] * 1e3 for r in found])}
    worst = max(f["first_resolve_ms"]["median"] for f in per_family.values())
    worst_cpu = max(f["first_resolve_cpu_ms"]["median"] for f in per_family.values())
    worst_up = max(f["next_size_up"]["first_resolve_ms"]["median"] for f in per_family.values() if "next_size_up" in f)
    result = {
        "corpus": str(CORPUS.relative_to(ROOT)),
        "tuned_csv_files": len(csvs),
        "tuned_csv_bytes": csv_bytes,
        "tables": len(list(IMPORTED.glob("*/*.json"))),
        "table_bytes": table_bytes,
        "packages": {r.distribution: r.version for r in releases},
        "wheel_bytes": wheel_bytes,
        "installed_bytes": installed,
        "installed_over_csv": installed / csv_bytes,
        "wheels_over_csv": wheel_bytes / csv_bytes,
        "families": len(FAMILIES),
        "first_resolve": per_family,
        "worst_family_first_resolve_ms": worst,
        "worst_family_first_resolve_cpu_ms": worst_cpu,
        "worst_family_first_resolve_next_size_up_ms": worst_up,
        "load_average_1min_before": load,
        "relaxed_lookups_against_aiters": lookups,
        "round_trip_files_compared": len(csvs),
        "round_trip_differences": differences,
        "targets": {"installed_over_csv": 2.0, "worst_family_first_resolve_ms": 500.0},
    }
    where = write_result("aiter-corpus", result, args.out) if args.out else "(not written: no --out)"
    print(f"aiter corpus: {len(csvs)} CSVs, {csv_bytes / 1e6:.1f} MB; installed {installed / 1e6:.1f} MB "
          f"({result['installed_over_csv']:.2f}x), wheels {wheel_bytes / 1e6:.1f} MB; first resolve, worst family "
          f"{worst:.0f} ms ({worst_cpu:.0f} ms of CPU), {worst_up:.0f} ms at the next size up; relaxed lookups: "
          + ", ".join(f"{k} {v['asked'] - v['differ']}/{v['asked']} as aiter's" for k, v in lookups.items())
          + f"; round trip: {len(differences)} files differ -> {where}")


if __name__ == "__main__":
    main()
