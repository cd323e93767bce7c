"""Helpers shared by the benchmark scripts: result files and machine facts."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT / "tests"))

from flyconfigs.schema import Artifact, Candidate, load_artifact  # noqa: E402
from flyconfigs.tuner.timing import Measurement  # noqa: E402


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import os

    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def quantiles(samples: list[float]) -> dict[str, float]:
    """Median, p20 and p80 of ``samples`` (the timing protocol's own quantiles)."""
    m = Measurement(tuple(samples))
    return {"median": m.median_us, "p20": m.quantile(0.2), "p80": m.quantile(0.8), "n": len(samples)}


def configs_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments of a script that times given configs of the op over shapes:
    ``--out``, ``--grid`` (repeatable), ``--config`` (JSON, repeatable) and ``--samples``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--grid", action="append", required=True, help="a preset or key grid (repeatable)")
    parser.add_argument("--config", action="append", required=True, type=json.loads,
                        help="a config of the op (JSON; repeatable); one the spec refuses for a shape is left out there")
    parser.add_argument("--samples", type=int, default=15)
    return parser


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


def artifacts_of(folder: Path, kernel: str | None, product: str | None = None,
                 option: str = "--product") -> list[tuple[Path, Artifact]]:
    """``folder``'s artifacts of ``kernel`` (of every kernel when ``None``) with their
    paths, in file-name order; only ``product``'s when it is given.  Without ``product``, a
    folder that holds several kernels' or products' artifacts is refused (``SystemExit``
    naming ``option``), so one figure never mixes two devices' tunings."""
    found = [(path, load_artifact(path)) for path in sorted(folder.glob(f"{kernel}-*.json" if kernel else "*.json"))]
    found = [(path, a) for path, a in found if product in (None, a.device.product)]
    for what, values, name in (("kernels", {a.kernel.name for _, a in found}, "--kernel"),
                               ("products", {a.device.product for _, a in found}, option)):
        if len(values) > 1:
            raise SystemExit(f"{folder}: artifacts of several {what} ({', '.join(sorted(map(str, values)))}); "
                             f"name one with {name}")
    return found


def timed_in(candidate: Candidate, artifact: Artifact) -> str:
    """``final`` or ``screen``: the protocol that timed ``candidate``, from its
    ``timed_in`` (schema 1.2), or for a file made before 1.2, ``final`` when its sample
    count is the final protocol's.  Screen and final times are not the same measurement,
    so a figure that compares two candidates says which each was."""
    if candidate.timed_in is not None:
        return candidate.timed_in
    protocol = artifact.provenance.timing_protocol
    timing = candidate.timing
    return "final" if protocol is not None and timing is not None and timing.samples == protocol.samples else "screen"


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
                slots[i] = out

        return run

    return {name: treated(call) for name, call in calls.items()}, kept
