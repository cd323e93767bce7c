"""Two aiter CSVs that make one output file never lose a row silently: ``import aiter``
refuses the second of two files of one name whose rows differ (as ``import vllm`` does),
so whatever it says it imported is on disk."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiter_corpus import CORPUS
from flyconfigs.cli import main

A8W8 = CORPUS / "aiter" / "configs" / "a8w8_tuned_gemm.csv"
LINES = A8W8.read_text().splitlines()
HEADER, ROWS = LINES[0], [line for line in LINES[1:] if line.startswith("gfx942,80,")][:12]


def _csv(folder: Path, rows: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / A8W8.name
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


def _rows_on_disk(out: Path) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for table in out.rglob("*.json"):
        rows.extend(tuple(r) for r in json.loads(table.read_text())["rows"])
    return rows


def test_two_files_of_one_name_with_other_rows_are_refused_not_overwritten(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _csv(tmp_path / "machine-a", ROWS[:2])
    second = _csv(tmp_path / "machine-b", ROWS[2:3])
    out = tmp_path / "out"
    assert main(["import", "aiter", str(first), str(second), "--out", str(out), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [t["from"] for t in report["tables"]] == [str(first)]
    assert [r["file"] for r in report["refused"]] == [str(second)]
    assert "the same table" in report["refused"][0]["message"]
    assert len(_rows_on_disk(out)) == 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sets(st.integers(0, len(ROWS) - 1), min_size=1), min_size=2, max_size=3))
def test_whatever_is_said_imported_is_on_disk(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              picks: list[set[int]]) -> None:
    # Any files of one name and device: every file said imported has all its rows on
    # disk; a file whose rows differ from the first one's is refused, by name.
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    files = [_csv(root / f"m{i}", [ROWS[j] for j in sorted(pick)]) for i, pick in enumerate(picks)]
    out = root / "out"
    capsys.readouterr()
    code = main(["import", "aiter", *map(str, files), "--out", str(out), "--json"])
    report = json.loads(capsys.readouterr().out)
    on_disk = sorted(_rows_on_disk(out))
    assert len(on_disk) == len(picks[0])
    assert all(t["rows"] == len(on_disk) for t in report["tables"])
    differ = [str(f) for f, pick in zip(files, picks, strict=True) if pick != picks[0]]
    assert sorted({r["file"] for r in report["refused"]}) == sorted(differ)
    assert code == (1 if differ else 0)
