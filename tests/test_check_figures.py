"""The figures of record: every figure ``bench/figures.json`` registers is quoted on its
page as registered and its result file holds it, so a page edited without its result (or
a result re-run without its page) fails here, the day it happens."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.check_figures import REGISTRY, check, command_of, missing_needs, moved


def test_every_registered_figure_is_on_its_page_and_in_its_result_file() -> None:
    registry = json.loads(REGISTRY.read_text())
    report = check(registry, runs_wanted=None, skip_slow=True, run=False)
    assert [(r["id"], r["flags"]) for r in report["figures"] if r["flags"]] == []
    for figure in registry["figures"]:
        assert figure["date"] and figure["commit"] and figure["machine"] and figure["command"], figure["id"]
        assert figure["kind"] == "gpu" or figure["run"] in registry["runs"], figure["id"]
        if "in_sample" in figure:
            assert figure.get("held_out"), f"{figure['id']}: an in-sample figure needs its held-out one beside it"


def test_a_figure_is_flagged_past_its_noise_and_an_exact_one_on_any_change() -> None:
    assert not moved(1.05, 1.20, 0.15) and moved(1.05, 1.21, 0.15)
    assert moved(22635, 22634, 0.0) and not moved(0, 0, 0.0) and moved(0, 1, 0.0)


def test_a_need_not_installed_or_of_another_version_is_named() -> None:
    assert missing_needs(["pydantic"]) == []
    assert missing_needs(["no-such-distribution-anywhere"]) == ["no-such-distribution-anywhere"]
    assert missing_needs(["pydantic==0.0.1"])[0].startswith("pydantic==0.0.1 (found ")


def test_a_run_names_another_commits_code_laid_out_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.tree_at

    laid: list[str] = []

    def fake_tree_at(commit: str, dest: Path, repository: Path | None = None) -> str:
        laid.append(commit)
        dest.mkdir(parents=True)
        return f"{dest / 'site'}:{dest / 'src'}"

    monkeypatch.setattr(bench.tree_at, "tree_at", fake_tree_at)
    spec = {"command": ["python", "-m", "bench.resolve", "--against", "recording={tree:32bdbcf}", "--against",
                        "again={tree:32bdbcf}", "--out", "{out}"]}
    command = command_of(spec, tmp_path / "out", tmp_path)
    tree = tmp_path / "trees" / "32bdbcf"
    assert command == [sys.executable, "-m", "bench.resolve", "--against", f"recording={tree / 'site'}:{tree / 'src'}",
                       "--against", f"again={tree / 'site'}:{tree / 'src'}", "--out", str(tmp_path / "out")]
    assert laid == ["32bdbcf"]
