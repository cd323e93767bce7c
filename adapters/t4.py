"""Kernel Tuner's T4 results files (the "Open Autotuning Results Schema" 1.0.0, which
Kernel Tuner's ``store_output_file`` writes) from and to measured artifacts.

A T4 results file is one tuning run: ``results`` holds one entry per configuration tried,
each with its ``configuration``, ``times``, ``invalidity``, ``correctness``, ``measurements``
and ``objectives``; it names neither the kernel, the problem (the key) nor the device.

**Export** (:func:`artifact_to_t4`): one file per measured artifact, each candidate one
result: ``configuration`` its config; ``invalidity`` ``correct`` for ``ok``, ``compile``,
``runtime``, ``correctness`` and ``constraints`` for ``compile_error``, ``launch_error``,
``wrong_result`` and ``skipped``; ``correctness`` 0 for a wrong result, else 1;
``measurements`` ``time`` (the median, in milliseconds, Kernel Tuner's objective and unit)
and flyconfigs' own statistics in their own units (``median_us``, ``p20_us``, ``p80_us``,
``min_us``, ``samples``, ``bandwidth_gbps``), the resources (``registers``, …) and the
failure ``message``; ``objectives`` ``["time"]``; ``times`` ``{"runtimes": []}`` (the
samples themselves are not kept).  What T4 has no field for (kernel, key, device, selection,
provenance, the winner's and the default's configs and timings) goes under
``metadata.flyconfigs``, beside Kernel Tuner's ``metadata.timeunit``.

**Import** (:func:`t4_to_artifact`): a file flyconfigs wrote comes back as the artifact it
was made from (equal as models).  A file Kernel Tuner wrote needs the kernel, key and device
given; each result becomes a candidate, timed from ``times.runtimes`` (milliseconds; the
median, 20th and 80th percentiles and minimum, in microseconds) or else from the ``time``
measurement; the winner is the correct result of the lowest median, the default the
kernel's default config where it was tried; the artifact is labelled ``imported``
(measured by another tool), its source the file.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flyconfigs.errors import ArtifactError, FieldProblem
from flyconfigs.schema.load import parse_artifact
from flyconfigs.schema.models import SCHEMA_VERSION, Artifact, Device

__all__ = ["T4_VERSION", "artifact_to_t4", "t4_schema", "t4_to_artifact", "validate_t4"]

T4_VERSION = "1.0.0"
"""The T4 results schema version written and read."""
SCHEMA_FILE = Path(__file__).with_name("t4_schema") / "results-schema.json"
"""The T4 results schema, as Kernel Tuner 1.5.0 ships it (``t4_schema/ORIGIN.md``)."""
_INVALIDITY = {"ok": "correct", "compile_error": "compile", "launch_error": "runtime", "wrong_result": "correctness",
               "skipped": "constraints"}
_STATUS = {**{v: k for k, v in _INVALIDITY.items()}, "timeout": "launch_error"}
_STATS = (("median_us", "us"), ("p20_us", "us"), ("p80_us", "us"), ("min_us", "us"), ("samples", ""),
          ("bandwidth_gbps", "GB/s"))
_RESOURCES = ("registers", "spill_bytes", "shared_bytes", "max_blocks_per_cu", "occupancy")


def t4_schema() -> dict[str, Any]:
    """The T4 results JSON Schema (``SCHEMA_FILE``)."""
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return schema


def validate_t4(document: object, file: str = "<T4>") -> None:
    """Check ``document`` against T4's own JSON Schema; :class:`ArtifactError` naming
    ``file`` and each failing field.  Needs ``jsonschema`` (Kernel Tuner's own dependency)."""
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:
        raise ArtifactError(file, [FieldProblem("", "validating T4 needs jsonschema: pip install jsonschema")]) from None
    validator = _validator(jsonschema)
    problems = [FieldProblem(".".join(map(str, e.absolute_path)), e.message) for e in validator.iter_errors(document)]
    if problems:
        raise ArtifactError(file, problems)


@functools.lru_cache(maxsize=1)
def _validator(jsonschema: Any) -> Any:
    return jsonschema.Draft202012Validator(t4_schema())


def _result(candidate: Any) -> dict[str, Any]:
    measurements: list[dict[str, Any]] = []
    timing = candidate.timing
    if timing is not None:
        measurements.append({"name": "time", "value": timing.median_us / 1000.0, "unit": "ms"})
        for name, unit in _STATS:
            value = getattr(timing, name)
            if value is not None:
                measurements.append({"name": name, "value": value, "unit": unit})
    if candidate.resources is not None:
        for name in _RESOURCES:
            value = getattr(candidate.resources, name)
            if value is not None:
                measurements.append({"name": f"resources.{name}", "value": value, "unit": ""})
    if candidate.message is not None:
        measurements.append({"name": "message", "value": candidate.message, "unit": ""})
    if candidate.timed_in is not None:  # the tuner's protocol that timed it: screen or final
        measurements.append({"name": "timed_in", "value": candidate.timed_in, "unit": ""})
    return {"configuration": dict(candidate.config), "times": {"runtimes": []},
            "invalidity": _INVALIDITY[candidate.status], "correctness": 0 if candidate.status == "wrong_result" else 1,
            "measurements": measurements, "objectives": ["time"]}


def artifact_to_t4(artifact: Artifact) -> dict[str, Any]:
    """``artifact`` (measured: every candidate timed or refused, none only compiled) as a T4
    results document (module docstring); :class:`ArtifactError` for a predicted one, whose
    candidates were ranked, never run."""
    if artifact.selection.rule == "predicted":
        raise ArtifactError(artifact.kernel.name, [FieldProblem("selection.rule", "a predicted artifact was never "
                                                                "measured: T4 holds measurements")])
    data = artifact.model_dump(mode="json")
    flyconfigs = {name: data[name] for name in ("schema_version", "kernel", "device", "key", "winner", "default",
                                                "selection", "provenance")}
    return {"schema_version": T4_VERSION, "results": [_result(c) for c in artifact.candidates],
            "metadata": {"timeunit": "milliseconds", "flyconfigs": flyconfigs}}


def _measured(result: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for m in result.get("measurements") or []:
        if isinstance(m, dict) and isinstance(m.get("name"), str):
            found[m["name"]] = m.get("value")
    return found


def _quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, linearly interpolated (numpy's default)."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _timing(result: Mapping[str, Any], measured: Mapping[str, Any]) -> dict[str, Any] | None:
    if all(isinstance(measured.get(n), (int, float)) for n in ("median_us", "p20_us", "p80_us", "min_us", "samples")):
        return {name: measured[name] for name, _ in _STATS if measured.get(name) is not None}
    times = result.get("times") or {}
    runtimes = [float(v) * 1000.0 for v in times.get("runtimes") or [] if isinstance(v, (int, float))]
    if runtimes:
        ordered = sorted(runtimes)
        return {"median_us": _quantile(ordered, 0.5), "p20_us": _quantile(ordered, 0.2),
                "p80_us": _quantile(ordered, 0.8), "min_us": ordered[0], "samples": len(ordered)}
    time = measured.get("time")
    if isinstance(time, (int, float)) and not isinstance(time, bool) and math.isfinite(time) and time > 0:
        us = float(time) * 1000.0
        return {"median_us": us, "p20_us": us, "p80_us": us, "min_us": us, "samples": 1}
    return None


def _candidate(result: Mapping[str, Any], where: str, file: str) -> dict[str, Any]:
    if not isinstance(result, dict) or not isinstance(result.get("configuration"), dict):
        raise ArtifactError(file, [FieldProblem(where, "expected a result with a configuration object")])
    status = _STATUS.get(str(result.get("invalidity")))
    if status is None:
        raise ArtifactError(file, [FieldProblem(f"{where}.invalidity", f"got {result.get('invalidity')!r}")])
    if status == "ok" and result.get("correctness") == 0:
        status = "wrong_result"
    measured = _measured(result)
    candidate: dict[str, Any] = {"config": result["configuration"], "status": status}
    timing = _timing(result, measured) if status == "ok" else None
    if status == "ok" and timing is None:
        raise ArtifactError(file, [FieldProblem(f"{where}.measurements", "a correct result without a time")])
    if timing is not None:
        candidate["timing"] = timing
    resources = {n: measured[f"resources.{n}"] for n in _RESOURCES if f"resources.{n}" in measured}
    if resources:
        candidate["resources"] = resources
    if measured.get("timed_in") in ("screen", "final") and timing is not None:
        candidate["timed_in"] = measured["timed_in"]
    if isinstance(measured.get("message"), str):
        candidate["message"] = measured["message"]
    elif status != "ok":  # Kernel Tuner records the error under __error__ (and as the time)
        error = measured.get("__error__", measured.get("time"))
        why = f": {error}" if isinstance(error, str) and error else ""
        candidate["message"] = f"T4 invalidity {result.get('invalidity')}{why}"
    return candidate


def t4_to_artifact(document: object, file: str, kernel: Mapping[str, Any] | None = None,
                   key: Mapping[str, Any] | None = None, device: Device | None = None,
                   default: Mapping[str, Any] | None = None) -> Artifact:
    """The artifact a T4 results ``document`` holds (module docstring): a file flyconfigs
    wrote needs nothing more; one Kernel Tuner wrote needs ``kernel`` (``{"name", "version"}``),
    ``key`` and ``device`` (and ``default``, the kernel's default config, if it was tried).
    Raises :class:`ArtifactError` naming ``file`` and the field for what cannot be read."""
    validate_t4(document, file)
    assert isinstance(document, dict)  # validate_t4 checked it
    results = document.get("results") or []
    candidates = [_candidate(r, f"results.{i}", file) for i, r in enumerate(results)]
    if not candidates:
        raise ArtifactError(file, [FieldProblem("results", "no result")])
    ours = (document.get("metadata") or {}).get("flyconfigs")
    if isinstance(ours, dict):
        data = {**ours, "candidates": candidates}
        return parse_artifact(data, file)[0]
    if kernel is None or key is None or device is None:
        raise ArtifactError(file, [FieldProblem("metadata", "a T4 file names no kernel, key or device: give them "
                                                            "(--kernel, the key items and --device)")])
    timed = [c for c in candidates if c["status"] == "ok"]
    if not timed:
        raise ArtifactError(file, [FieldProblem("results", "no correct result to serve")])
    best = min(timed, key=lambda c: c["timing"]["median_us"])
    tried_default = next((c for c in timed if default is not None and c["config"] == dict(default)), None)
    data = {
        "schema_version": SCHEMA_VERSION, "kernel": {**kernel, "source_sha256": None}, "device": device.model_dump(mode="json"),
        "key": dict(key), "candidates": candidates, "winner": {"config": best["config"], "timing": best["timing"]},
        "default": None if tried_default is None else {"config": tried_default["config"],
                                                        "timing": tried_default["timing"]},
        "selection": {"rule": "imported"},
        "provenance": {"tool": "flyconfigs t4 import", "backend": "kernel_tuner", "source": {
            "project": "KernelTuner/kernel_tuner", "file": Path(file).name, "device_from": "given to the import"}},
    }
    return parse_artifact(data, file)[0]
