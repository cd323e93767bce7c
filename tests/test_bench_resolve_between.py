"""bench/resolve_between.py times the first resolve of keys no tuning names, each version
in fresh processes; here one run of one key over the committed artifacts, to show the
script runs and records what it says."""

from __future__ import annotations

import json
from pathlib import Path

from bench.resolve_between import ROOT, grid_keys, main


def test_a_grid_gives_every_combination() -> None:
    keys = grid_keys("M=48,420 N=1280 dtype=bf16")
    assert [(k["M"], k["N"], k["dtype"]) for k in keys] == [(48, 1280, "bf16"), (420, 1280, "bf16")]


def test_one_run_of_one_key_records_its_time_and_that_the_versions_agree(tmp_path: Path) -> None:
    # The checkout against itself: two versions that must serve the same config.
    main(["--grid", "M=48 N=1280 dtype=bf16", "--runs", "1", "--against", f"again={ROOT}", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "resolve-between.json").read_text())
    assert result["keys"] == 1 and result["same_configs"] is True
    assert set(result["figures"]) == {"this", "again"}
    assert all(f["ms_per_key_median"] > 0 and len(f["ms_per_key_runs"]) == 1 for f in result["figures"].values())
