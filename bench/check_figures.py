"""Every figure of record beside a fresh one: reads ``bench/figures.json`` (each figure's
page and the text quoting it, its value, date, commit, machine, command, result file and
noise), checks that the page still quotes it and that its result file holds it, re-runs
the CPU benchmarks behind them (each once, in a scratch folder, with the load average
before and after), and prints the page's figure, the file's and the fresh one side by
side, flagging a figure that moved by more than its noise.  GPU figures are checked
against their result files only, and listed with what the page must say beside them
(in-sample, measured before a serving change).  A run's command may name another commit's
code as ``{tree:COMMIT}`` (laid out by ``bench.tree_at``), so a figure of the code that
recorded it, timed beside this checkout's with ``--against``, is re-run too.  A benchmark
whose needs are not installed is listed with the command that installs them, not run.

    python -m bench.check_figures [--skip-slow] [--only RUN] [--no-run] [--out bench/results/figures-check]

``--out STEM`` writes STEM.json and STEM.md.  Exit status 1 when a figure is flagged.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import machine

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = Path(__file__).resolve().parent / "figures.json"
_SAFE = {"round": round, "next": next, "len": len, "sum": sum, "min": min, "max": max, "abs": abs}


def read_value(expr: str, document: Any) -> float:
    """``expr`` (a Python expression over the result's JSON, named ``d``) evaluated."""
    return float(eval(expr, {"__builtins__": _SAFE}, {"d": document}))  # noqa: S307 - the registry is committed code


def moved(page: float, fresh: float, noise: float) -> bool:
    """Whether ``fresh`` is further from ``page`` than ``noise`` (relative; 0: must be equal)."""
    if page == 0:
        return fresh != 0
    return abs(fresh / page - 1) > noise + 1e-9


def missing_needs(needs: list[str]) -> list[str]:
    """The requirements of ``needs`` (``name`` or ``name==version``) not installed here."""
    absent = []
    for need in needs:
        name, _, version = need.partition("==")
        try:
            found = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            absent.append(need)
            continue
        if version and found != version:
            absent.append(f"{need} (found {found})")
    return absent


def command_of(spec: dict[str, Any], out: Path, scratch: Path) -> list[str]:
    """``spec``'s command as run: ``python`` this interpreter, ``{out}`` the run's folder,
    and ``{tree:COMMIT}`` the ``PYTHONPATH`` of that commit's code, laid out once per check
    under ``scratch`` by :func:`bench.tree_at.tree_at` (what ``--against`` takes)."""
    from bench.tree_at import tree_at

    command = []
    for part in spec["command"]:
        if part == "python":
            command.append(sys.executable)
            continue
        part = part.replace("{out}", str(out))
        for commit in re.findall(r"\{tree:([0-9a-f]{7,40})\}", part):
            dest = scratch / "trees" / commit
            path = os.pathsep.join([str(dest / "site"), str(dest / "src")])
            if not dest.exists():
                path = tree_at(commit, dest, ROOT)
            part = part.replace(f"{{tree:{commit}}}", path)
        command.append(part)
    return command


def _run(name: str, spec: dict[str, Any], scratch: Path) -> dict[str, Any]:
    out = scratch / name
    out.mkdir(parents=True, exist_ok=True)
    command = command_of(spec, out, scratch)
    load_before = os.getloadavg()
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    record: dict[str, Any] = {"seconds": round(time.perf_counter() - started, 1), "load_average_before": load_before,
                              "load_average_after": os.getloadavg(), "returncode": done.returncode}
    if done.returncode != 0:
        # Told relative to the checkout, so a committed report names no path of this machine.
        record["error"] = done.stderr[-1500:].replace(str(scratch), "SCRATCH").replace(str(ROOT), ".")
        return record
    record["document"] = json.loads((out / spec["result"]).read_text())
    return record


def check(registry: dict[str, Any], runs_wanted: set[str] | None, skip_slow: bool, run: bool) -> dict[str, Any]:
    """The report: each figure with its page, file and fresh values and its flags."""
    pages = {page: (ROOT / page).read_text() for page in {f["page"] for f in registry["figures"]}}
    fresh: dict[str, dict[str, Any]] = {}
    needed = {f["run"] for f in registry["figures"] if f["kind"] == "cpu"}
    with tempfile.TemporaryDirectory() as scratch:
        for name in sorted(needed):
            spec = registry["runs"][name]
            absent = missing_needs(spec.get("needs", []))
            if not run or (runs_wanted is not None and name not in runs_wanted):
                fresh[name] = {"skipped": "not asked"}
            elif skip_slow and spec.get("slow"):
                fresh[name] = {"skipped": f"slow (about {spec.get('minutes', '?')} min): run without --skip-slow"}
            elif absent:
                fresh[name] = {"skipped": f"needs {', '.join(absent)}: {spec['install']}"}
            else:
                print(f"running {name}: {' '.join(spec['command'])}", file=sys.stderr, flush=True)
                fresh[name] = _run(name, spec, Path(scratch))
    rows = []
    for figure in registry["figures"]:
        row = {key: figure[key] for key in ("id", "page", "kind", "what", "value", "noise", "date", "commit", "machine",
                                            "command", "result")}
        flags = []
        if figure["quote"] not in pages[figure["page"]]:
            flags.append("not quoted on the page as registered")
        try:
            row["file_value"] = read_value(figure["expr"], json.loads((ROOT / figure["result"]).read_text()))
            if moved(figure["value"], row["file_value"], figure["noise"]):
                flags.append("the page's figure is not its result file's")
        except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
            flags.append(f"result file unreadable: {type(exc).__name__}: {exc}")
        if figure["kind"] == "cpu":
            done = fresh[figure["run"]]
            if "document" in done:
                row["fresh_value"] = read_value(figure["expr"], done["document"])
                row["fresh_load_average"] = [done["load_average_before"][0], done["load_average_after"][0]]
                if moved(figure["value"], row["fresh_value"], figure["noise"]):
                    worse = (row["fresh_value"] > figure["value"]) == (figure["better"] == "lower")
                    flags.append("MOVED " + ("worse" if worse or figure["better"] == "equal" else "better")
                                 + f" by more than its noise ({figure['noise']:.0%})")
            else:
                row["fresh"] = done.get("skipped") or f"failed: {done.get('error', '')[-300:]}"
        for note in ("in_sample", "held_out", "stale", "note"):
            if note in figure:
                row[note] = figure[note]
        row["flags"] = flags
        rows.append(row)
    return {"benchmark": "figures-check", "machine": machine(), "load_average_at_end": os.getloadavg(),
            "revision": _revision(), "runs": {n: {k: v for k, v in r.items() if k != "document"} for n, r in fresh.items()},
            "figures": rows, "flagged": [r["id"] for r in rows if r["flags"]]}


def _revision() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    # Its own report, rewritten by every check, does not make the checked code another.
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":(exclude)bench/results/figures-check*"], capture_output=True, text=True)
    return done.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def _fmt(value: Any) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "" if value is None else str(value)
    if value == int(value) and abs(value) >= 10:
        return f"{int(value):,}"
    return f"{value:.5g}" if math.isfinite(value) else str(value)


def markdown(report: dict[str, Any]) -> str:
    """The report as a table, the page's figure beside the file's and the fresh one."""
    lines = [f"# Figures of record, checked at {report['revision']} ({report['machine']['when']})", "",
             f"Machine: {report['machine']['cpus']} CPUs, Python {report['machine']['python']}, shared with other work; "
             f"load average at the end {report['load_average_at_end'][0]:.2f}. Each CPU benchmark ran once, its load "
             "average before and after in the last column; a fresh figure from a loaded machine is slower than the "
             "machine's own, so compare it with a baseline run beside it before calling it a regression.", "",
             "| figure | page | recorded (date, commit, machine) | page | result file | fresh | load | flags |",
             "|---|---|---|---:|---:|---:|---|---|"]
    for row in report["figures"]:
        notes = [f"in-sample: {row['in_sample']}; held out: {row['held_out']}" if "in_sample" in row else "",
                 f"stale: {row['stale']}" if "stale" in row else ""]
        fresh = _fmt(row.get("fresh_value")) if "fresh_value" in row else ("GPU: not re-run" if row["kind"] == "gpu"
                                                                            else f"not run ({row.get('fresh', '')})")
        load = "–".join(f"{x:.2f}" for x in row.get("fresh_load_average", []))
        flags = "; ".join(row["flags"] + [n for n in notes if n]) or "ok"
        lines.append(f"| {row['what']} (`{row['id']}`) | {row['page']} | {row['date']}, {row['commit']}, {row['machine']} | "
                     f"{_fmt(row['value'])} | {_fmt(row.get('file_value'))} | {fresh} | {load} | {flags} |")
    lines += ["", "Commands: " + "; ".join(sorted({f"`{r['command']}`" for r in report["figures"]})), ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", type=Path, default=REGISTRY)
    parser.add_argument("--only", action="append", help="re-run only this benchmark of the registry's runs (repeatable)")
    parser.add_argument("--skip-slow", action="store_true", help="leave out the benchmarks marked slow")
    parser.add_argument("--no-run", action="store_true", help="check the pages against the result files only")
    parser.add_argument("--out", type=Path, help="write STEM.json and STEM.md")
    args = parser.parse_args()
    registry = json.loads(args.registry.read_text())
    report = check(registry, set(args.only) if args.only else None, args.skip_slow, not args.no_run)
    text = markdown(report)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        args.out.with_suffix(".md").write_text(text)
    return 1 if report["flagged"] else 0


if __name__ == "__main__":
    sys.exit(main())
