"""bench/off_grid.py scores the configs served for keys no grid names against tuning them:
the tuning run's folder must never serve its own keys, every served config says where it
came from, and the summary counts only keys served from elsewhere.  The GPU timing is
the tuner's; what is here runs on the CPU, on real artifacts in temporary folders."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench.off_grid import paths_without, plan, summary, tuned_artifacts
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.registry import PATH_ENV, DeviceQuery, Resolver
from flyconfigs.schema.models import Device
from tests.factories import H200, artifact_dict

QUERY = DeviceQuery.of(Device.model_validate(H200).identity)
KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}


def _write(folder: Path, key: dict[str, Any], winner_index: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    name = f"rmsnorm-{key['M']}x{key['N']}-{key['dtype']}.json"
    (folder / name).write_text(json.dumps(artifact_dict(key=key, winner_index=winner_index)))


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """A package-like folder of tunings at M = 4096, and a tuning run's folder at two keys
    it does not name (M = 1500 and 96) whose winners differ from the package's."""
    served, tuned = tmp_path / "served", tmp_path / "tuned"
    _write(served, KEY, winner_index=0)
    _write(tuned, {**KEY, "M": 1500}, winner_index=2)
    _write(tuned, {**KEY, "M": 96}, winner_index=3)
    return served, tuned


def test_the_tuned_folder_is_left_out_of_the_path_and_one_holding_it_is_refused(folders: tuple[Path, Path]) -> None:
    served, tuned = folders
    kept, dropped = paths_without(tuned, os.pathsep.join([str(served), str(tuned), ""]))
    assert (kept, dropped) == ([str(served)], [str(tuned)])
    with pytest.raises(SystemExit, match="holds"):
        paths_without(tuned, str(tuned.parent))


def test_a_key_is_served_from_elsewhere_than_its_own_tuning(folders: tuple[Path, Path],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    served, tuned = folders
    monkeypatch.setenv(PATH_ENV, os.pathsep.join([str(served), str(tuned)]))
    artifacts = tuned_artifacts(tuned, "rmsnorm", "NVIDIA H200")
    # As the environment stands, the tuning run would serve its own winners, exactly.
    as_is = plan(SPEC, artifacts, Resolver(), QUERY)
    assert {r["served"]["key_match"] for r in as_is} == {"exact"}
    rows = plan(SPEC, artifacts, Resolver(paths_without(tuned)[0]), QUERY)
    assert [r["key"]["M"] for r in rows] == [1500, 96]
    package_winner = artifact_dict(key=KEY)["winner"]["config"]
    for row, tuned_index in zip(rows, (2, 3), strict=True):
        record = row["served"]
        assert (record["source"], record["origin"], record["key_match"]) == ("override", str(served), "nearest")
        # The package's one key never timed the family's default: no paired evidence
        # against it, so the default serves (the record says so), not that key's winner.
        assert record["matched_key"] == KEY and record["config"] == row["default"] != package_winner
        assert row["tuned"] == artifact_dict(key=KEY, winner_index=tuned_index)["winner"]["config"] != package_winner
        assert row["default"] == SPEC.default_config(row["key"], QUERY)


def test_a_folder_without_this_products_tunings_is_refused(folders: tuple[Path, Path]) -> None:
    with pytest.raises(SystemExit, match="no rmsnorm artifact tuned on AMD"):
        tuned_artifacts(folders[1], "rmsnorm", "AMD Instinct MI300X")


def _row(m: int, served: float, tuned: float, default: float, match: str = "nearest") -> dict[str, Any]:
    record = {"source": "package" if match != "none" else "default", "key_match": match, "adapted_from": None}
    return {"key": {**KEY, "M": m}, "served": record, "served_us": served, "tuned_us": tuned, "default_us": default}


def test_the_summary_scores_only_keys_served_from_another_keys_tuning_or_the_default() -> None:
    rows = [_row(5, 10.2, 10.0, 11.0), _row(96, 12.0, 10.0, 10.0, "none"), _row(1500, 10.0, 10.0, 10.1),
            _row(6000, 50.0, 10.0, 50.0, "exact")]
    result = summary(rows)
    assert (result["keys"], result["keys_served_exactly"], result["keys_off_grid"]) == (4, 1, 3)
    assert result["served_within_3pct_fraction"] == pytest.approx(2 / 3)
    assert result["geomean_served_over_tuned"] == pytest.approx((1.02 * 1.2 * 1.0) ** (1 / 3))
    assert (result["worst_served_over_tuned"], result["worst_key"]["M"]) == (pytest.approx(1.2), 96)
    assert result["default_within_3pct_fraction"] == pytest.approx(2 / 3)
    assert result["served_from"] == {"default/none": 1, "package/exact": 1, "package/nearest": 2}
    assert summary([])["geomean_served_over_tuned"] is None


def test_each_rule_asked_for_is_resolved_from_the_same_sources_and_scored_like_the_served(
        folders: tuple[Path, Path]) -> None:
    from bench.neighbour_vote import rules_of

    served, tuned = folders
    every = rules_of(SPEC)
    rules = {name: every[name] for name in ("nearest", "paired")}
    rows = plan(SPEC, tuned_artifacts(tuned, "rmsnorm", "NVIDIA H200"), Resolver([str(served)]), QUERY, rules)
    package_winner = artifact_dict(key=KEY)["winner"]["config"]
    for row in rows:
        # The nearest key's winner where no rule weighs it; the shipped rule's default
        # where the one key never timed it, as the served record itself.
        assert row["rules"]["nearest"]["config"] == package_winner
        assert row["rules"]["paired"]["config"] == row["served"]["config"] == row["default"]
    timed = [{**row, "served_us": 10.0, "tuned_us": 10.0, "default_us": 10.0,
              "rules": {"nearest": {"us": 10.5}, "paired": {"us": 10.0}}} for row in rows]
    figures = summary(timed)["rules"]
    assert figures["nearest"]["geomean_over_tuned"] == pytest.approx(1.05)
    assert (figures["nearest"]["worse_than_default"], figures["paired"]["worse_than_default"]) == (2, 0)
    assert figures["paired"]["within_3pct_fraction"] == 1.0
