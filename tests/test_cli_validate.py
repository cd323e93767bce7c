"""``flyconfigs validate``: exit codes, one line per problem, JSON output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flyconfigs.cli import main

CORPUS = Path(__file__).parent / "corpus"


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
