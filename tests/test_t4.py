"""Kernel Tuner's T4 results files: the committed measured RMSNorm artifacts go out as T4
files that T4's own JSON Schema accepts and come back equal; a file Kernel Tuner wrote
comes in as an artifact of the kernel, key and device given."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from flyconfigs.adapters.t4 import SCHEMA_FILE, artifact_to_t4, t4_to_artifact, validate_t4
from flyconfigs.cli import main
from flyconfigs.errors import ArtifactError
from flyconfigs.schema.load import load_artifact
from flyconfigs.schema.models import Artifact
from flyconfigs.schema.pack import folder_artifacts

ROOT = Path(__file__).resolve().parents[1]
MEASURED = [a for a in folder_artifacts(ROOT / "artifacts" / "sm90", "rmsnorm") if a.selection.rule != "predicted"]
"""Every committed measured RMSNorm artifact, read from its pack whole (candidates included)."""


def _kernel_tuner_schema() -> dict[str, Any]:
    """T4's results schema from the installed kernel_tuner package (without importing it),
    else the copy flyconfigs vendors (byte-identical: checked below where one is installed)."""
    spec = importlib.util.find_spec("kernel_tuner")
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "schema" / "T4" / "1.0.0" / "results-schema.json"
        if path.is_file():
            loaded: dict[str, Any] = json.loads(path.read_text())
            return loaded
    vendored: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return vendored


def test_the_vendored_schema_is_kernel_tuners() -> None:
    spec = importlib.util.find_spec("kernel_tuner")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("kernel_tuner is not installed")
    theirs = Path(list(spec.submodule_search_locations)[0]) / "schema" / "T4" / "1.0.0" / "results-schema.json"
    assert theirs.read_bytes() == SCHEMA_FILE.read_bytes()


def _round_trip(artifacts: list[Artifact], tmp_path: Path) -> int:
    paths = []
    for artifact in artifacts:  # each as the single file the tuner writes
        paths.append(tmp_path / "in" / artifact.file_name())
        paths[-1].parent.mkdir(exist_ok=True)
        paths[-1].write_bytes(artifact.to_json_bytes())
    assert main(["t4", "export", *map(str, paths), "--out", str(tmp_path / "t4")]) == 0
    written = sorted((tmp_path / "t4").rglob("*.t4.json"))
    assert len(written) == len(paths)
    schema = _kernel_tuner_schema()
    for path in written:
        jsonschema.validate(json.loads(path.read_text()), schema)  # T4's own schema, not ours
    assert main(["t4", "import", *map(str, written), "--out", str(tmp_path / "back")]) == 0
    equal = 0
    for path in paths:
        original = load_artifact(path)
        back = load_artifact(tmp_path / "back" / original.device.arch / original.file_name())
        assert back == original, path.name
        equal += 1
    return equal


def test_committed_rmsnorm_artifacts_go_through_t4_and_come_back_equal(tmp_path: Path) -> None:
    sample = MEASURED[:: max(1, len(MEASURED) // 6)]
    products = {a.device.product for a in sample}
    assert products == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"} or len(products) >= 1
    assert _round_trip(sample, tmp_path) == len(sample)


@pytest.mark.slow
def test_every_committed_rmsnorm_artifact_goes_through_t4_and_comes_back_equal() -> None:
    # The library calls the commands above make, without their files (T4's schema is slow to check).
    assert len(MEASURED) == 984
    validator = jsonschema.Draft202012Validator(_kernel_tuner_schema())
    for original in MEASURED:
        document = json.loads(json.dumps(artifact_to_t4(original)))
        validator.validate(document)
        assert t4_to_artifact(document, original.file_name()) == original, original.file_name()


def test_an_exported_file_says_what_t4_says() -> None:
    artifact = MEASURED[0]
    document = artifact_to_t4(artifact)
    validate_t4(document)
    assert document["schema_version"] == "1.0.0" and document["metadata"]["timeunit"] == "milliseconds"
    first, candidate = document["results"][0], artifact.candidates[0]
    assert first["configuration"] == dict(candidate.config) and first["objectives"] == ["time"]
    assert candidate.timing is not None
    time = next(m for m in first["measurements"] if m["name"] == "time")
    assert time == {"name": "time", "value": candidate.timing.median_us / 1000.0, "unit": "ms"}
    assert "candidates" not in document["metadata"]["flyconfigs"]  # the candidates travel as T4 results only


def _kernel_tuner_results(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """What Kernel Tuner's ``store_output_file`` writes for a run of ``configs`` (the first
    fails to compile; the others ran with three samples each): made by Kernel Tuner itself
    where it is installed, else restated from its ``get_t4_results`` (1.5.0)."""
    runs = [[0.0020, 0.0022, 0.0021], [0.0031, 0.0030, 0.0032]]  # the second config ran fastest
    timings = {"compile_time": 10.0, "benchmark_time": 1.0, "framework_time": 0.1, "strategy_time": 0.0,
               "verification_time": 0.0}
    try:
        from kernel_tuner import util
        from kernel_tuner.file_utils import get_t4_results
    except ImportError:
        results = [{"configuration": configs[0], "times": {"compilation": 10.0, "runtimes": []}, "invalidity": "compile",
                    "correctness": 1, "measurements": [{"name": "time", "value": "error", "unit": "ms"}],
                    "objectives": ["time"]}]
        results += [{"configuration": c, "times": {"compilation": 10.0, "runtimes": r}, "invalidity": "correct",
                     "correctness": 1, "measurements": [{"name": "time", "value": sum(r) / 3, "unit": "ms"}],
                     "objectives": ["time"]} for c, r in zip(configs[1:], runs, strict=False)]
        return {"results": results, "schema_version": "1.0.0", "metadata": {"timeunit": "milliseconds"}}
    tune_params = {k: sorted({c[k] for c in configs}, key=str) for k in configs[0]}
    error = util.CompilationFailedConfig("error")
    ran = [{**configs[0], "time": error, "__error__": error, **timings}]
    ran += [{**c, "time": sum(r) / 3, "times": r, **timings} for c, r in zip(configs[1:], runs, strict=False)]
    made: dict[str, Any] = json.loads(json.dumps(get_t4_results(ran, tune_params), cls=util.NpEncoder))
    return made


def test_a_file_kernel_tuner_wrote_is_imported_for_the_kernel_key_and_device_given(tmp_path: Path) -> None:
    from flyconfigs.kernels.rmsnorm import SPEC

    key = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
    default = SPEC.default_config(key, None)
    others = [c.config for c in MEASURED[0].candidates if dict(c.config) != default][:2]
    configs = [dict(others[0]), dict(others[1]), dict(default)]
    t4_file = tmp_path / "rmsnorm-run.json"
    t4_file.write_text(json.dumps(_kernel_tuner_results(configs)))
    argv = ["t4", "import", str(t4_file), "--out", str(tmp_path / "out"), "--kernel", "rmsnorm",
            "--key", *(f"{k}={v}" for k, v in key.items()), "--device", "H100"]
    assert main(argv) == 0
    (written,) = (tmp_path / "out" / "sm90").glob("*.json")
    artifact = load_artifact(written)
    assert artifact.kernel.name == "rmsnorm" and dict(artifact.key) == key
    assert artifact.device.product == "NVIDIA H100 80GB HBM3" and artifact.selection.rule == "imported"
    assert [c.status for c in artifact.candidates] == ["compile_error", "ok", "ok"]
    assert dict(artifact.winner.config) == configs[1]  # the lowest median: 2.1 us
    assert artifact.winner.timing is not None and artifact.winner.timing.median_us == pytest.approx(2.1)
    assert artifact.winner.timing.samples == 3
    assert artifact.default is not None and dict(artifact.default.config) == default
    source = artifact.provenance.source
    assert source is not None and source.project == "KernelTuner/kernel_tuner" and source.file == t4_file.name


def test_a_t4_file_without_a_kernel_needs_one_and_a_bad_one_names_the_field() -> None:
    bare = {"schema_version": "1.0.0", "results": [{"configuration": {"threads": 1}, "times": {},
                                                    "invalidity": "correct", "correctness": 1,
                                                    "measurements": [{"name": "time", "value": 0.1, "unit": "ms"}]}]}
    with pytest.raises(ArtifactError, match="names no kernel, key or device"):
        t4_to_artifact(bare, "run.json")
    with pytest.raises(ArtifactError) as caught:
        t4_to_artifact({**bare, "results": [{"configuration": {}, "times": {}, "invalidity": "fine",
                                             "correctness": 1}]}, "run.json")
    assert caught.value.problems[0].field == "results.0.invalidity"
