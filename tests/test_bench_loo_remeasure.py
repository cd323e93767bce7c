"""bench/loo_remeasure.py re-times on a GPU what each rule of the leave-one-out served:
which configs a row names, the sample of keys, and the figures of one interleaved
measurement per key.  The timing is off_grid's (the tuner's final protocol); what is here
runs on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.loo_remeasure import combined, names_of, picks, sample, summary

A, B, C = {"threads": 128}, {"threads": 256}, {"threads": 512}


def _row(**rules: tuple[dict[str, int], float | None]) -> dict[str, object]:
    return {"key": {"M": 1, "N": 1024}, **{r: {"config": c, "ratio": x} for r, (c, x) in rules.items()}}


def test_each_distinct_config_is_timed_once_and_an_untimed_pick_is_left_out() -> None:
    row = _row(winner=(A, 1.0), default=(B, 1.02), nearest=(A, 1.0), paired=(B, 1.02), vote=(C, None))
    configs, index = picks(row)
    assert configs == [A, B]
    assert index == {"winner": 0, "default": 1, "nearest": 0, "paired": 1}


def test_a_sample_is_seeded_and_every_prefix_of_it_is_a_sample_too() -> None:
    rows = [{"key": {"M": m}} for m in range(50)]
    first = sample(rows, 10, seed=3)
    assert first == sample(rows, 10, seed=3) and len(first) == 10
    assert [r["key"]["M"] for r in first] != sorted(r["key"]["M"] for r in first), "in the order drawn"
    every = sample(rows, 0, seed=3)
    assert sorted(r["key"]["M"] for r in every) == list(range(50)) and every == sample(rows, 80, seed=3)


def test_the_figures_compare_the_times_of_one_measurement() -> None:
    timed = [{"key": {"M": 1}, "us": {"winner": 10.0, "default": 10.5, "paired": 10.0, "nearest": 10.8}},
             {"key": {"M": 2}, "us": {"winner": 20.0, "default": 19.0, "paired": 19.0, "nearest": 20.0}}]
    figures = summary(timed)
    assert figures["paired"]["geomean_over_fastest"] == pytest.approx(1.0)
    assert figures["winner"]["geomean_over_fastest"] == pytest.approx((1.0 * 20 / 19) ** 0.5, abs=1e-4)
    assert figures["nearest"]["geomean_over_winner"] == pytest.approx((1.08 * 1.0) ** 0.5, abs=1e-4)
    # 10.8 against the default's 10.5 is within 3%; 20.0 against 19.0 is not.
    assert figures["nearest"]["worse_than_default"] == 1
    assert (figures["nearest"]["worst"], figures["nearest"]["worst_key"]) == (pytest.approx(1.08, abs=1e-3), {"M": 1})
    assert "vote" not in figures


def test_a_config_is_one_config_however_it_spells_the_tunables_at_their_defaults() -> None:
    from flyconfigs.kernels.fused_add_rmsnorm import SPEC

    spelled = {"impl": "triton", "block_n": 4096, "rows_per_program": 1, "num_warps": 8, "num_stages": 1}
    full = {**spelled, "row_tiles": 1, "eviction": "none", "weight_load": "late"}
    row = _row(winner=(full, 1.0), default=(spelled, 1.0), paired=(full, 1.0))
    configs, index = picks(row, SPEC.tunable_defaults)
    assert configs == [full] and index == {"winner": 0, "default": 0, "paired": 0}
    assert len(picks(row)[0]) == 2, "without the family's defaults they are two spellings"
    assert names_of(index, 1) == ["winner"]


def test_resume_goes_on_with_the_same_run_only(tmp_path: Path) -> None:
    import argparse
    import json

    from bench.loo_remeasure import main, resumed

    out = tmp_path / "out.json"
    loo = {"revision": "abc"}
    args = argparse.Namespace(kernel="rmsnorm", mode="n", seed=0)
    assert resumed(out, loo, args) == []
    out.write_text(json.dumps({"kernel": "rmsnorm", "mode": "n", "seed": 0, "loo_revision": "abc",
                               "rows": [{"key": {"M": 1}}]}))
    assert resumed(out, loo, args) == [{"key": {"M": 1}}]
    with pytest.raises(SystemExit, match="same run only"):
        resumed(out, loo, argparse.Namespace(kernel="rmsnorm", mode="key", seed=0))
    # A file of before --repeats was measured once a key: it goes on with --repeats 1 only.
    assert resumed(out, loo, argparse.Namespace(kernel="rmsnorm", mode="n", seed=0, repeats=1)) == [{"key": {"M": 1}}]
    with pytest.raises(SystemExit, match="same run only"):
        resumed(out, loo, argparse.Namespace(kernel="rmsnorm", mode="n", seed=0, repeats=3))
    source = tmp_path / "loo.json"
    source.write_text(json.dumps({"revision": "other", "rows": {}}))
    with pytest.raises(SystemExit, match="same run only"):  # before any GPU is asked for
        main(["--loo", str(source), "--kernel", "rmsnorm", "--mode", "n", "--resume", "--out", str(out)])


def test_several_measurements_of_a_key_are_combined_config_by_config() -> None:
    runs = [[10.0, 12.0, 11.0], [10.4, 11.0, 11.2], [9.8, 11.6, 30.0]]
    assert combined(runs) == [10.0, 11.6, 11.2]  # the median of each config's medians
    assert combined([[10.0, 12.0], [11.0, 13.0]]) == [10.5, 12.5]
    assert combined([[5.0]]) == [5.0]
    with pytest.raises(ValueError, match="same configs"):
        combined([[1.0, 2.0], [1.0]])


def test_the_summary_says_how_far_the_winner_moved_between_measurements() -> None:
    timed = [{"key": {"M": 1}, "us": {"winner": 10.0, "default": 10.5},
              "us_runs": {"winner": [10.0, 10.1, 9.9], "default": [10.5, 10.4, 10.6]}},
             {"key": {"M": 2}, "us": {"winner": 20.0, "default": 21.0},
              "us_runs": {"winner": [20.0, 21.0, 19.5], "default": [21.0, 21.0, 21.0]}}]
    moved = summary(timed)["winner_moved"]
    assert moved["keys"] == 2 and moved["over_3_percent"] == 1  # 21.0 / 19.5 is 7.7%
    assert moved["largest"] == pytest.approx(21.0 / 19.5, abs=1e-3)
    assert moved["median"] == pytest.approx(((10.1 / 9.9) + (21.0 / 19.5)) / 2, abs=1e-4)
    assert "winner_moved" not in summary([{"key": {"M": 1}, "us": {"winner": 1.0, "default": 1.0}}])


class _Device:
    """A stand-in for the GPU the benchmark asks for (none exists on the CPU machine):
    only what the run records of it."""

    product = "NVIDIA H100 80GB HBM3"
    identity = ("nvidia", "sm90", 132)

    def model_dump(self, mode: str = "json") -> dict[str, str]:
        return {"product": self.product}


def test_a_run_stopped_by_its_budget_says_so_and_repeats_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    import json

    import bench.off_grid
    import flyconfigs.gpu
    import flyconfigs.registry
    from bench.loo_remeasure import main

    rows = [_row(winner=({"threads": 128}, 1.0), default=({"threads": 256}, 1.1)) | {"key": {"M": m, "N": 1024}}
            for m in (1, 2, 3)]
    loo = tmp_path / "loo.json"
    loo.write_text(json.dumps({"revision": "r", "rows": {"rmsnorm": {_Device.product: {"n": rows}}}}))
    calls: list[int] = []

    def timed(decl: object, key: object, configs: list[object], *rest: object) -> list[float]:
        calls.append(len(configs))
        return [10.0 + len(calls), 11.0]  # the winner moves between measurements, the default does not

    monkeypatch.setattr(bench.off_grid, "time_configs", timed)
    monkeypatch.setattr(flyconfigs.gpu, "get_backend", lambda: type("B", (), {"device": lambda self: _Device()})())
    monkeypatch.setattr(flyconfigs.registry.DeviceQuery, "of", staticmethod(lambda identity: None))
    monkeypatch.setattr("flyconfigs.kernels.plugin.tunable_kernel", lambda name: type(
        "D", (), {"tunable_defaults": {}, "check_key": staticmethod(lambda key: key)})())
    out = tmp_path / "out.json"
    # A budget already spent after the first key: one key timed, twice, and exit 3.
    monkeypatch.setattr("time.time", iter([0.0, 0.0] + [1000.0] * 20).__next__)
    assert main(["--loo", str(loo), "--kernel", "rmsnorm", "--mode", "n", "--repeats", "2", "--budget-s", "1",
                 "--out", str(out)]) == 3
    first = json.loads(out.read_text())
    assert first["repeats"] == 2 and len(first["rows"]) == 1 and calls == [2, 2]
    assert first["rows"][0]["us_runs"] == {"winner": [11.0, 12.0], "default": [11.0, 11.0]}
    assert first["rows"][0]["us"] == {"winner": 11.5, "default": 11.0}
    # Resumed with no budget, it times the other two keys and ends with 0.
    monkeypatch.setattr("time.time", lambda: 0.0)
    assert main(["--loo", str(loo), "--kernel", "rmsnorm", "--mode", "n", "--repeats", "2", "--resume",
                 "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())["rows"]) == 3 and len(calls) == 6
