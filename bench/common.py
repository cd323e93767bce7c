"""Helpers shared by the benchmarks: result files, machine facts, the quantiles of the
timing protocol, and the treatment of the timed calls' outputs."""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from flyconfigs.tuner.timing import Measurement

__all__ = ["OUTPUTS", "RESULTS", "accepted_configs", "add_against", "compile_bytecode", "machine", "quantiles", "timed",
           "versions_of", "write_graph_run", "write_result"]

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def add_against(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the repeatable ``--against NAME=PYTHONPATH`` of the benchmarks that
    time another commit's code (``python -m bench.tree_at``) beside this checkout's."""
    parser.add_argument("--against", action="append", default=[], metavar="NAME=PYTHONPATH",
                        help="another commit's code (python -m bench.tree_at COMMIT DEST), timed beside this checkout's")


def versions_of(parser: argparse.ArgumentParser, against: list[str]) -> dict[str, str]:
    """The versions to time, by name: ``this`` (the checkout, an empty path) first, then
    each ``--against`` in its order; a malformed one is the parser's error, naming it."""
    versions = {"this": ""}
    for given in against:
        name, sep, path = given.partition("=")
        if not sep or not name or not path:
            parser.error(f"--against {given!r}: give NAME=PYTHONPATH")
        if name in versions:
            parser.error(f"--against {given!r}: the name {name!r} is taken")
        versions[name] = path
    return versions


def compile_bytecode(root: Path) -> bool:
    """Write the bytecode of the package's folders under ``root`` (a checkout, or a tree of
    ``bench.tree_at``), as installing the package does, so a fresh process timed there
    reads it instead of compiling every module (which ``PYTHONDONTWRITEBYTECODE`` would
    otherwise make it do on every start); whether every module compiled."""
    import compileall

    from bench.tree_at import SUBPACKAGES

    folders = [root / name for name in ("flyconfigs", *SUBPACKAGES) if (root / name).is_dir()]
    return all([bool(compileall.compile_dir(folder, quiet=1)) for folder in folders])


def quantiles(samples: list[float]) -> dict[str, float]:
    """Median, p20 and p80 of ``samples`` (the timing protocol's own quantiles)."""
    m = Measurement(tuple(samples))
    return {"median": m.median_us, "p20": m.quantile(0.2), "p80": m.quantile(0.8), "n": len(samples)}


def accepted_configs(configs: list[dict[str, Any]], key: dict[str, Any],
                     query: Any) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """``configs`` (as ``--config`` gave them) named ``config-1``, ``config-2``, … by
    position: those the op's spec accepts at ``key`` on the device ``query``, and why it
    refuses each of the others."""
    from flyconfigs.kernels.rmsnorm import SPEC

    accepted: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}
    for i, config in enumerate(configs, 1):
        why = SPEC.check_config(config, key, query)
        if why is None:
            accepted[f"config-{i}"] = config
        else:
            refused[f"config-{i}"] = why
    return accepted, refused


def write_result(name: str, payload: dict[str, Any], out: Path | None = None) -> Path:
    """Write ``payload`` with the machine facts to ``bench/results/<name>.json``."""
    path = (out or RESULTS) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": name, "machine": machine(), **payload}, indent=2, sort_keys=True) + "\n")
    return path


def write_graph_run(out: Path, benchmark: str, rows: list[dict[str, Any]], device: Any, started: float,
                    summary: dict[str, Any] | None, protocol: dict[str, Any] | None = None) -> None:
    """Write a graph-replay benchmark's rows so far to ``out`` (``complete`` once a
    ``summary`` is given): the machine, the device, torch's version and the protocol,
    with ``protocol``'s entries beside it."""
    import time

    import torch

    payload = {
        "benchmark": benchmark,
        "machine": machine(),
        "device": device.model_dump(mode="json"),
        "torch": torch.__version__,
        "protocol": "K calls over rotated copies (>= 3x L2 where memory allows) captured in one graph; "
                    "interleaved replays; per-call = replay time / K; median of samples",
        **(protocol or {}),
        "wall_s": time.time() - started,
        "complete": summary is not None,
        "summary": summary,
        "rows": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")


OUTPUTS = {
    "kept": "every call's output is kept until the run ends, so each call writes memory of its own, "
            "like the rotated inputs it reads",
    "reused": "every call's output is dropped at once, so the allocator hands the next call the same "
              "memory (often still in L2)",
}
"""How the outputs of the timed calls are treated, the same for every contender."""


def timed(calls: dict[str, Callable[[int], Any]], copies: int,
          outputs: str) -> tuple[dict[str, Callable[[int], None]], list[list[Any]]]:
    """The functions to time: each contender's call over rotated copy ``i``, with what it
    returns (the outputs it allocated) treated as ``outputs`` says (a key of OUTPUTS),
    and the lists that keep them (drop them after timing)."""
    kept: list[list[Any]] = []

    def treated(call: Callable[[int], Any]) -> Callable[[int], None]:
        slots: list[Any] = [None] * copies
        if outputs == "kept":
            kept.append(slots)

        def run(i: int) -> None:
            out = call(i)
            if outputs == "kept":
                # One slot per rotated copy: holding the output keeps the allocator from
                # handing the next call the same, still cached, memory.  A peer whose
                # output was dropped would otherwise write to L2 while the op wrote to DRAM.
                slots[i] = out

        return run

    return {name: treated(call) for name, call in calls.items()}, kept
