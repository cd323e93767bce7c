"""One aiter row a table cannot hold is refused alone, naming its line and column: a cell
over 1,024 characters no longer refuses every row of its device, and an arch of no known
generation (``gfxabc``) is a refused row, not a raw ``ValueError``."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiter_corpus import CORPUS
from flyconfigs.adapters.aiter import import_aiter_file
from flyconfigs.cli import main

A8W8 = CORPUS / "aiter" / "configs" / "a8w8_tuned_gemm.csv"
LINES = A8W8.read_text().splitlines()
HEADER = LINES[0].split(",")
ROWS = [line.split(",") for line in LINES[1:] if line.startswith("gfx942,80,")][:4]


def _csv(path: Path, rows: list[list[str]]) -> Path:
    path.write_text("\n".join(",".join(r) for r in [HEADER, *rows]) + "\n")
    return path


@pytest.mark.parametrize("length", [1025, 5000])
def test_a_long_cell_refuses_its_row_alone_naming_line_and_column(tmp_path: Path, length: int) -> None:
    rows = [list(r) for r in ROWS]
    rows[1][HEADER.index("kernelName")] = "k" * length
    result = import_aiter_file(_csv(tmp_path / A8W8.name, rows))
    assert sum(len(t.rows) for t in result.tables) == len(ROWS) - 1
    (refused,) = result.refused
    assert [p.field for p in refused.problems] == ["line 3.kernelName"]
    assert f"{length} characters" in refused.problems[0].message


def test_an_arch_of_no_known_generation_is_a_refused_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [list(r) for r in ROWS]
    rows[0][HEADER.index("gfx")] = "gfxabc"
    path = _csv(tmp_path / A8W8.name, rows)
    assert main(["import", "aiter", str(path), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "line 2.gfx" in err and "Traceback" not in err
    assert "3 rows imported, 1 refused" in err


def test_a_key_only_csv_is_refused_and_an_empty_config_never_serves(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from flyconfigs.kernels.aiter_gemm import FAMILIES

    keys = HEADER[:HEADER.index("q_dtype_w") + 1]
    path = tmp_path / A8W8.name
    path.write_text("\n".join(",".join(r[:len(keys)]) for r in [keys, *ROWS]) + "\n")
    assert main(["import", "aiter", str(path), "--out", str(tmp_path / "out")]) == 1
    assert "no config column" in capsys.readouterr().err
    family = FAMILIES["aiter_gemm_a8w8"]
    assert family.check_config({}, {}, None) is not None
    assert family.check_config({"kernelId": 3, "splitK": 0, "kernelName": "k"}, {}, None) is None


@pytest.mark.parametrize("digits", ["1234567890123456789", "-9223372036854775808", "9223372036854775807",
                                    "99999999999999999999", "12345678901234567890"])
def test_a_long_integer_cell_exports_back_as_its_digits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], digits: str) -> None:
    import csv

    rows = [list(r) for r in ROWS]
    rows[0][HEADER.index("kernelId")] = digits
    out = tmp_path / "out"
    assert main(["import", "aiter", str(_csv(tmp_path / A8W8.name, rows)), "--out", str(out)]) == 0
    monkeypatch.setenv("FLYCONFIGS_PATH", str(out / "gfx942"))
    assert main(["export", "aiter", "--out", str(tmp_path / "exported")]) == 0
    with (tmp_path / "exported" / "aiter" / "configs" / A8W8.name).open() as f:
        exported = list(csv.DictReader(f))
    assert exported[0]["kernelId"] == digits
