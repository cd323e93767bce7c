"""Predicted artifacts and the rule that measured beats predicted: within a step of the
search a measured artifact wins whatever the source order; a measurement on a device of
the same arch and compute units (an MI325X for an MI300X) beats a prediction for the
device itself; a borrowed same-arch measurement (an MI300A, 228 CUs) does not.  explain
and doctor say when a config is predicted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factories import MI300X, artifact_dict, predicted_artifact_dict
from flyconfigs import resolve
from flyconfigs.cli import main
from flyconfigs.registry import default_resolver
from flyconfigs.registry.core.products import find_product
from flyconfigs.schema import Artifact, write_atomic

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
MI325X = {**MI300X, "product": "AMD Instinct MI325X"}
MI300A = {**MI300X, "product": "AMD Instinct MI300A", "compute_units": 228}


def _put(folder: Path, data: dict[str, Any]) -> None:
    artifact = Artifact.model_validate(data)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / artifact.file_name(), artifact.to_json_bytes())


def _path(monkeypatch: pytest.MonkeyPatch, *folders: Path) -> None:
    monkeypatch.setenv("FLYCONFIGS_PATH", ":".join(map(str, folders)))
    default_resolver().refresh()


def test_within_one_step_measured_beats_predicted_whatever_the_order(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _put(tmp_path / "first", predicted_artifact_dict(device=MI300X, key=KEY, winner_index=2))
    _put(tmp_path / "second", artifact_dict(device=MI300X, key=KEY, winner_index=3))
    _path(monkeypatch, tmp_path / "first", tmp_path / "second")
    r = resolve("rmsnorm", KEY, "MI300X")
    assert r.selection == "measured" and r.file and "second" in r.file
    _path(monkeypatch, tmp_path / "first")
    r = resolve("rmsnorm", KEY, "MI300X")
    assert r.selection == "predicted" and r.layer == "exact" and r.source == "override"


def test_a_same_silicon_measurement_beats_a_prediction_a_borrowed_one_does_not(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _put(tmp_path / "pred", predicted_artifact_dict(device=MI300X, key=KEY, winner_index=2))
    _put(tmp_path / "mi325x", artifact_dict(device=MI325X, key=KEY, winner_index=3))
    _put(tmp_path / "mi300a", artifact_dict(device=MI300A, key=KEY, winner_index=4))
    _path(monkeypatch, tmp_path / "pred", tmp_path / "mi325x")
    r = resolve("rmsnorm", KEY, "MI300X")
    assert (r.selection, r.layer, r.matched_device.product) == ("measured", "same-compute-units", "AMD Instinct MI325X")
    assert any("predicted, not served" in reason for reason in r.reasons)
    _path(monkeypatch, tmp_path / "pred", tmp_path / "mi300a")
    r = resolve("rmsnorm", KEY, "MI300X")
    assert (r.selection, r.layer) == ("predicted", "exact")
    # And with no prediction the MI300A's measurement is borrowed as before.
    _path(monkeypatch, tmp_path / "mi300a")
    assert resolve("rmsnorm", KEY, "MI300X").borrowed


def test_explain_and_doctor_say_predicted_and_name_the_measuring_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _put(tmp_path / "pred", predicted_artifact_dict(device=MI300X, key=KEY, winner_index=2))
    _path(monkeypatch, tmp_path / "pred")
    args = [f"{k}={v}" for k, v in KEY.items()]
    assert main(["explain", "rmsnorm", *args, "--device", "MI300X"]) == 0
    out = capsys.readouterr().out
    assert "predicted (not measured on this device; model rmsnorm-ridge 1)" in out
    assert out.rstrip().endswith("predicted (not measured on this device)]")
    monkeypatch.setenv("FLYCONFIGS_DEVICE", "MI300X")
    default_resolver().refresh()
    assert main(["doctor", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert len(notes) == 1 and "predicted" in notes[0] and "flyconfigs tune rmsnorm --backend hip" in notes[0]


def test_a_measured_run_replaces_the_predictions_it_covers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # The test backend stands in for the device (no AMD GPU here): its measured artifacts
    # for the simulated device replace predictions for that device, key by key.
    from flyconfigs.tuner.simulated import SIMULATED_DEVICE

    device = {k: SIMULATED_DEVICE[k] for k in ("vendor", "arch", "product", "compute_units", "features", "wave_size")}
    keys = [{**KEY, "M": m} for m in (1, 4096)]
    for key in keys:
        _put(tmp_path / "pred", predicted_artifact_dict(device=device, key=key, winner_index=2))
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "M=4096 N=8192 dtype=bf16",
                 "--budget", "4", "--out", str(tmp_path / "measured"), "--json"]) == 0
    capsys.readouterr()
    _path(monkeypatch, tmp_path / "pred", tmp_path / "measured")
    spec = {k: device[k] for k in ("vendor", "arch", "product", "compute_units", "features")}
    served = {key["M"]: resolve("rmsnorm", key, json.dumps(spec)).selection for key in keys}
    assert served == {1: "predicted", 4096: "measured"}


def test_every_catalog_product_is_a_valid_artifact_device() -> None:
    for name in ("MI300X", "MI325X", "MI300A"):
        product = find_product(name)
        assert product is not None
        _ = predicted_artifact_dict(device=product.device.model_dump(mode="json"), key=KEY)
        Artifact.model_validate(_)
