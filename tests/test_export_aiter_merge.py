"""``export aiter`` writes what the search serves: your own copy of a shipped CSV (the
same file name, kernel and device) overrides the shipped rows of its keys and keeps the
others; a table that cannot be written (an unsafe upstream path, other columns) is
reported and left out while every other file is written, and a user's CSV with its
columns in another order is written in the file's first order."""

from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiter_corpus import CORPUS, REVISION
from flyconfigs.adapters.aiter import import_aiter_file
from flyconfigs.cli import main
from flyconfigs.registry import Resolver
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import write_atomic

A8W8 = CORPUS / "aiter" / "configs" / "a8w8_tuned_gemm.csv"
UPSTREAM = "aiter/configs/a8w8_tuned_gemm.csv"
LINES = A8W8.read_text().splitlines()
HEADER = LINES[0].split(",")
OURS = [line.split(",") for line in LINES[1:] if line.startswith("gfx942,80,")][:10]
MI308X = DeviceQuery("amd", "gfx942", "AMD gfx942, 80 CUs", 80, ())


def _import(csv_path: Path, folder: Path, upstream_dir: str = "aiter/configs") -> None:
    for table in import_aiter_file(csv_path, REVISION, upstream_dir=upstream_dir).tables:
        write_atomic(folder / table.file_name(), table.to_json_bytes())


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([header, *rows])
    return path


def _mine(row: list[str]) -> list[str]:
    """``row`` as your own tuning found it: another kernel id and time."""
    cells = dict(zip(HEADER, row, strict=True))
    cells["kernelId"] = str(int(cells["kernelId"]) + 1)
    cells["us"] = "1.5"
    return [cells[c] for c in HEADER]


def _exported(out: Path, capsys: pytest.CaptureFixture[str], code: int = 0) -> dict[tuple[str, ...], dict[str, str]]:
    capsys.readouterr()
    assert main(["export", "aiter", "--out", str(out), "--json"]) == code
    with (out / UPSTREAM).open() as f:
        rows = list(csv.DictReader(f))
    return {(r["gfx"], r["cu_num"], r["M"], r["N"], r["K"], r["q_dtype_w"]): r for r in rows}


def test_your_copy_of_a_shipped_file_overrides_its_keys_and_keeps_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    shipped, mine = tmp_path / "shipped", tmp_path / "mine"
    _import(A8W8, shipped)
    _import(_write_csv(tmp_path / "csv" / A8W8.name, HEADER, [_mine(OURS[0])]), mine)
    monkeypatch.setenv("FLYCONFIGS_PATH", f"{mine}:{shipped}")
    rows = _exported(tmp_path / "out", capsys)
    assert len(rows) == len(LINES) - 1  # every shipped row, the overridden one once
    first = tuple(OURS[0][:6])
    assert rows[first]["kernelId"] == _mine(OURS[0])[HEADER.index("kernelId")]
    second = tuple(OURS[1][:6])
    assert rows[second]["kernelId"] == OURS[1][HEADER.index("kernelId")]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sets(st.integers(0, len(OURS) - 1), min_size=1), st.sets(st.integers(0, len(OURS) - 1), min_size=1))
def test_the_export_of_two_copies_of_one_file_is_what_the_search_serves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        mine_rows: set[int], shipped_rows: set[int]) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    shipped, mine = root / "shipped", root / "mine"
    _import(_write_csv(root / "a" / A8W8.name, HEADER, [OURS[i] for i in sorted(shipped_rows)]), shipped)
    _import(_write_csv(root / "b" / A8W8.name, HEADER, [_mine(OURS[i]) for i in sorted(mine_rows)]), mine)
    monkeypatch.setenv("FLYCONFIGS_PATH", f"{mine}:{shipped}")
    rows = _exported(root / "out", capsys)
    assert len(rows) == len(mine_rows | shipped_rows)
    resolver = Resolver([str(mine), str(shipped)], packages=False)
    for i in mine_rows | shipped_rows:
        cells = dict(zip(HEADER, OURS[i], strict=True))
        key = {"cu_num": 80, "M": int(cells["M"]), "N": int(cells["N"]), "K": int(cells["K"]),
               "q_dtype_w": cells["q_dtype_w"]}
        served = resolver.resolve("aiter_gemm_a8w8", key, MI308X)
        assert served.key_match == "exact"
        assert str(served.config["kernelId"]) == rows[tuple(OURS[i][:6])]["kernelId"]


def test_a_users_csv_with_its_columns_in_another_order_is_exported_with_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    shipped, mine = tmp_path / "shipped", tmp_path / "mine"
    _import(A8W8, shipped)
    other = [*HEADER[::-1]]
    mine_row = dict(zip(HEADER, _mine(OURS[0]), strict=True))
    _import(_write_csv(tmp_path / "csv" / A8W8.name, other, [[mine_row[c] for c in other]]), mine)
    monkeypatch.setenv("FLYCONFIGS_PATH", f"{mine}:{shipped}")
    rows = _exported(tmp_path / "out", capsys)
    assert len(rows) == len(LINES) - 1
    assert rows[tuple(OURS[0][:6])]["kernelId"] == mine_row["kernelId"]


def test_a_table_of_an_unsafe_upstream_path_is_reported_and_the_others_exported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "path"
    _import(A8W8, folder)
    bpreshuffle = CORPUS / "aiter" / "configs" / "a8w8_bpreshuffle_tuned_gemm.csv"
    _import(bpreshuffle, folder, upstream_dir="../outside")
    monkeypatch.setenv("FLYCONFIGS_PATH", str(folder))
    rows = _exported(tmp_path / "out", capsys, code=1)
    assert len(rows) == len(LINES) - 1
    assert not (tmp_path / "outside").exists()
    capsys.readouterr()
    assert main(["export", "aiter", "--out", str(tmp_path / "out2"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert any("../outside" in p and "not a safe relative path" in p for p in report["problems"])
