"""``flyconfigs validate``: exit codes, one line per problem, JSON output, and the same
answer as the loader's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SiteDir
from factories import artifact_dict, make_artifact
from flyconfigs import resolve
from flyconfigs.cli import main
from flyconfigs.registry import refresh
from flyconfigs.registry.declarations import forget_loaded
from flyconfigs.schema import Artifact, write_atomic
from package_damage import read_manifest, write_manifest

CORPUS = Path(__file__).parent / "corpus"
KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"


def test_valid_folder_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(CORPUS / "good")]) == 0
    assert "2 valid, 0 invalid" in capsys.readouterr().err


def test_invalid_files_exit_one_with_one_line_per_problem(capsys: pytest.CaptureFixture[str]) -> None:
    bad = CORPUS / "bad" / "string-for-int.json"
    assert main(["validate", str(CORPUS / "good"), str(bad)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"{bad}: device.compute_units: Input should be a valid integer (got '132')"]


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--json", str(CORPUS / "bad" / "duplicate-key.json")]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["flyconfigs_output"] == 1 and payload["invalid"] == 1
    assert payload["files"][0]["problems"] == [{"field": "device.compute_units", "message": "duplicate object key"}]


def test_usage_errors_exit_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["validate"]) == 2
    assert main(["no-such-command"]) == 2


def test_console_entry_points_run() -> None:
    result = subprocess.run([sys.executable, "-m", "flyconfigs", "validate", str(CORPUS / "good")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_an_artifact_is_valid_when_another_distribution_also_declares_its_kernel(
        site: SiteDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Another distribution declares rmsnorm too; flyconfigs' own declaration owns it, so the
    # loader serves the artifact, and validate must say it is valid.
    info = site.root / "other_kernels-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: other-kernels\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[flyconfigs.kernels]\nrmsnorm = flyconfigs.kernels.rmsnorm:SPEC\n")
    forget_loaded()
    artifact = make_artifact()
    path = write_atomic(tmp_path / "local" / artifact.file_name(), artifact.to_json_bytes())
    folder = site.install("sm90", [artifact])
    try:
        assert resolve("rmsnorm", KEY, H200_SPEC).source == "package"
        forget_loaded()  # validate finds the two declarations itself, as a fresh process does
        assert main(["validate", str(path), str(folder)]) == 0, capsys.readouterr().out
    finally:
        forget_loaded()


def test_an_artifact_made_by_a_test_double_is_invalid(site: SiteDir, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    data = artifact_dict()
    data["provenance"]["backend"] = "simulated"
    artifact = Artifact.model_validate(data)
    site.install("sm90", [artifact])
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"  # the loader never serves it
    path = write_atomic(tmp_path / artifact.file_name(), artifact.to_json_bytes())
    assert main(["validate", str(path)]) == 1
    assert f"{path}: provenance.backend: test-double: made by the test backend" in capsys.readouterr().out


def test_newer_minor_manifest_fields_the_loader_ignores_are_noted(site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    folder = site.install("sm90", [make_artifact()])
    data = read_manifest(folder)
    data["schema_version"] = "1.9"
    data["signed_by"] = "someone"
    data["artifacts"][0]["signature"] = "abc"
    write_manifest(folder, data)
    refresh()
    assert main(["validate", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "note: ignored field of a newer minor: signed_by" in out
    assert "note: ignored field of a newer minor: artifacts[0].signature" in out
