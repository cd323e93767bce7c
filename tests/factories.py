"""Builders of realistic test artifacts, shared by tests and benchmarks."""

from __future__ import annotations

import itertools
from typing import Any

from flyconfigs.schema import SCHEMA_VERSION, Artifact

H200 = {
    "vendor": "nvidia",
    "arch": "sm90",
    "product": "NVIDIA H200",
    "compute_units": 132,
    "features": [],
    "wave_size": 32,
    "l2_bytes": 62914560,
    "memory_bandwidth_gbps": 4813.9,
    "driver_version": "580.65",
    "runtime_version": "13.0",
}
MI300X = {
    "vendor": "amd",
    "arch": "gfx942",
    "product": "AMD Instinct MI300X",
    "compute_units": 304,
    "features": ["sramecc+", "xnack-"],
    "wave_size": 64,
    "l2_bytes": 4194304,
    "memory_bandwidth_gbps": 5300.0,
}


def configs(n: int) -> list[dict[str, Any]]:
    """``n`` distinct RMSNorm configs; the first ones are valid for the usual test keys
    (N = 8192, bf16) on wave-32 and wave-64 devices alike."""
    space = itertools.product([256, 512, 1024, 128, 64, 32], [1, 2, 4, 8], [16, 8, 4, 0], ["reg", "smem", "reread"])
    out = []
    for threads, rows, vec, store in itertools.islice(space, n):
        out.append({"threads": threads, "rows_per_block": rows, "vector_bytes": vec, "row_storage": store, "occupancy": 0})
    return out


def artifact_dict(
    *,
    device: dict[str, Any] | None = None,
    key: dict[str, Any] | None = None,
    n_candidates: int = 8,
    winner_index: int = 0,
    kernel: str = "rmsnorm",
) -> dict[str, Any]:
    """A schema-valid artifact as plain JSON data."""
    cands = []
    for i, cfg in enumerate(configs(n_candidates)):
        median = 10.0 + i * 0.25 if i != winner_index else 9.0
        cands.append(
            {
                "config": cfg,
                "status": "ok",
                "timing": {
                    "median_us": median,
                    "p20_us": median * 0.99,
                    "p80_us": median * 1.01,
                    "min_us": median * 0.98,
                    "samples": 50,
                    "bandwidth_gbps": 3000.0 + i,
                },
                "resources": {"registers": 32 + i % 8, "spill_bytes": 0, "shared_bytes": 0, "occupancy": 1.0},
            }
        )
    if n_candidates > 2:
        cands[-1] = {"config": cands[-1]["config"], "status": "compile_error", "message": "error: too many registers"}
    default = cands[1] if n_candidates > 1 else cands[0]
    return {
        "schema_version": SCHEMA_VERSION,
        "kernel": {"name": kernel, "version": 1, "source_sha256": "ab" * 32},
        "device": dict(device or H200),
        "key": dict(key or {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}),
        "candidates": cands,
        "winner": {"config": cands[winner_index]["config"], "timing": cands[winner_index]["timing"]},
        "default": {"config": default["config"], "timing": default.get("timing")},
        "selection": {"rule": "beat-default-beyond-noise", "noise_band": 0.02, "remeasured": True, "kept_default": False},
        "provenance": {
            "tool": "flyconfigs 1.0.0",
            "backend": "cuda",
            "backend_versions": {"cuda-bindings": "13.3.0", "nvrtc": "13.0"},
            "compile_options": ["-arch=sm_90", "-std=c++17"],
            "timing_protocol": {
                "method": "graph-replay",
                "launches_per_sample": 20,
                "warmup": 5,
                "samples": 50,
                "rotate_bytes": 536870912,
                "interleaved": True,
            },
            "host": "h200-test",
            "created": "2026-12-01T10:00:00Z",
            "git_revision": "0123abcd",
            "command": ["flyconfigs", "tune", "rmsnorm"],
        },
    }


def staged_artifact_dict(**kwargs: Any) -> dict[str, Any]:
    """A schema-valid measured artifact that says which candidates the final timed (the
    winner, the default and candidate 2) and which only the screen, with both protocols
    (schema 1.2), with the timing held behind a spin kernel (1.3); the arguments are
    :func:`artifact_dict`'s."""
    data = artifact_dict(**kwargs)
    data["provenance"]["timing_protocol"]["held"] = True
    winner = kwargs.get("winner_index", 0)
    data["provenance"]["timing_protocol"]["screen"] = {
        "launches_per_sample": 4, "warmup": 1, "samples": 5, "group_size": 16, "finalists": 2}
    for i, cand in enumerate(data["candidates"]):
        if cand["status"] != "ok":
            continue
        if i in (winner, 1, 2):
            cand["timed_in"] = "final"
        else:
            cand["timed_in"] = "screen"
            cand["timing"] = {**cand["timing"], "samples": 5}
    return data


def make_artifact(**kwargs: Any) -> Artifact:
    """A validated :class:`Artifact` (see :func:`artifact_dict` for the arguments)."""
    return Artifact.model_validate(artifact_dict(**kwargs))


def value_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (the value itself first), for the fuzz tests."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(value_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(value_paths(v, (*prefix, i)))
    return out


def predicted_artifact_dict(**kwargs: Any) -> dict[str, Any]:
    """A schema-valid predicted artifact (compiled candidates ranked by a model, nothing
    timed) as plain JSON data; the arguments are :func:`artifact_dict`'s."""
    data = artifact_dict(**kwargs)
    winner = kwargs.get("winner_index", 0)
    for cand in data["candidates"]:
        if cand["status"] == "ok":
            cand["status"] = "compiled"
            cand["predicted_us"] = cand.pop("timing")["median_us"]
    data["winner"] = {"config": data["candidates"][winner]["config"]}
    data["default"] = {"config": data["default"]["config"]}
    data["selection"] = {"rule": "predicted"}
    data["provenance"]["backend"] = "hip"
    data["provenance"]["timing_protocol"] = None
    data["provenance"]["model"] = {"name": "rmsnorm-ridge", "version": 1}
    return data
