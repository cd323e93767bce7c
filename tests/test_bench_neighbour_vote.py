"""bench/neighbour_vote.py hides each tuned key (or every key of its N, or of its M) from
what serves it, refits a learned default without it, scores each rule's config by the hidden key's
own recorded timings, and replays the nearest-key step as the resolver runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.loo_scores import summary
from bench.neighbour_vote import check, fold_tables, hidden_of, leave_one_out, measured, rules_of
from flyconfigs.kernels.fused_add_rmsnorm import SPEC as FUSED
from flyconfigs.kernels.rmsnorm import SPEC
from test_neighbour_vote import FAST_AROUND, FAST_HERE, OTHER, _tuned, key


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "tuned"
    _tuned(folder, key(4096), [(FAST_HERE, 10.0), (FAST_AROUND, 10.1), (OTHER, 12.0)])
    _tuned(folder, key(2048), [(FAST_HERE, 7.0), (FAST_AROUND, 5.0), (OTHER, 6.0)])
    _tuned(folder, key(8192), [(FAST_HERE, 28.0), (FAST_AROUND, 20.0), (OTHER, 24.0)])
    _tuned(folder, key(2600), [(FAST_HERE, 8.0), (FAST_AROUND, 6.0), (OTHER, 7.0)])
    _tuned(folder, key(2600, 4096), [(FAST_HERE, 4.0), (FAST_AROUND, 3.0), (OTHER, 3.5)])
    return folder


def test_each_key_is_hidden_and_scored_by_its_own_timings(tmp_path: Path) -> None:
    tuned = measured(_folder(tmp_path), "rmsnorm", SPEC)["NVIDIA H200"]
    rows = leave_one_out(SPEC, tuned, None, "key")
    hidden = next(r for r in rows if r["key"]["M"] == 2600 and r["key"]["N"] == 8192)
    # Its nearest other key is 2048 (N = 8192), whose winner is FAST_AROUND, 6.0 here: the best.
    assert hidden["nearest"]["from"] == "nearest" and hidden["nearest"]["ratio"] == 1.0
    at_4096 = next(r for r in rows if r["key"]["M"] == 4096)
    assert at_4096["nearest"]["ratio"] == 10.1 / 10.0, "served the winner at 2600 (FAST_AROUND), timed 10.1 here"
    stats = summary(rows)
    assert stats["nearest"]["keys"] == 5 and stats["sibling"]["keys"] == 0


def test_hiding_an_n_hides_every_key_of_it(tmp_path: Path) -> None:
    tuned = measured(_folder(tmp_path), "rmsnorm", SPEC)["NVIDIA H200"]
    by_key = leave_one_out(SPEC, tuned, None, "key")
    by_n = leave_one_out(SPEC, tuned, None, "n")
    at = next(i for i, r in enumerate(by_n) if r["key"] == key(2600, 4096))
    # Alone at N = 4096, it is served N = 8192's keys either way; at N = 8192 a hidden key
    # is served the other row length's (the only one left) once every key of 8192 is hidden.
    assert by_n[at]["nearest"]["ratio"] == by_key[at]["nearest"]["ratio"]
    at_2600 = next(i for i, r in enumerate(by_n) if r["key"] == key(2600))
    assert by_n[at_2600]["nearest"]["config"] == FAST_AROUND  # the winner at 2600 x 4096


def test_each_way_of_hiding_hides_the_key_and_what_shares_its_axis(tmp_path: Path) -> None:
    tuned = measured(_folder(tmp_path), "rmsnorm", SPEC)["NVIDIA H200"]
    at = next(i for i, t in enumerate(tuned) if t.key == key(2600))  # M = 2600, N = 8192
    keys = {mode: sorted((tuned[j].key["M"], tuned[j].key["N"]) for j in hidden_of(tuned, at, mode))
            for mode in ("key", "n", "m")}
    assert keys == {"key": [(2600, 8192)], "n": [(2048, 8192), (2600, 8192), (4096, 8192), (8192, 8192)],
                    "m": [(2600, 4096), (2600, 8192)]}
    # The learned default is refitted without M = 2600's cells: it reads 2048 and 4096 then.
    tables = fold_tables(SPEC, tuned)
    assert tables is not None
    refitted = tables(hidden_of(tuned, at, "m"))
    assert all(cell[2] != 2600 for cell in refitted.cells) and len(refitted.cells) == len(tuned) - 2
    assert [c[2] for _, c in refitted.columns("bf16", "bf16", 2600)] == [2048, 4096]


def test_the_learned_default_is_refitted_without_what_is_hidden(tmp_path: Path) -> None:
    tuned = measured(_folder(tmp_path), "rmsnorm", SPEC)["NVIDIA H200"]
    tables = fold_tables(SPEC, tuned)
    assert tables is not None and fold_tables(FUSED, tuned) is None, "the fused family's default is not learned"
    every = tables(set())
    assert len(tables({0}).cells) == len(every.cells) - 1
    n_8192 = {i for i, t in enumerate(tuned) if t.key["N"] == 8192}
    assert all(cell[3] != 8192 for cell in tables(n_8192).cells)


def test_the_replay_serves_what_the_resolver_serves(tmp_path: Path) -> None:
    tuned = measured(_folder(tmp_path), "rmsnorm", SPEC)["NVIDIA H200"]
    assert check(SPEC, tuned, len(tuned), "key") == 0
    assert check(SPEC, tuned, len(tuned), "n") == 0
    assert check(SPEC, tuned, len(tuned), "m") == 0


def test_the_rules_compared() -> None:
    for spec in (SPEC, FUSED):
        rules = rules_of(spec)
        assert set(rules) == {"default", "nearest", "vote", "paired", "paired-se"}
        assert rules["nearest"].choose_from_neighbours(key(3000), iter(()), None) is None  # type: ignore[arg-type]
        assert rules["paired"].transfers_past_range == ("M",)  # type: ignore[attr-defined]
        assert not rules["vote"].neighbour_vote.with_default  # type: ignore[attr-defined]
        assert rules["paired-se"].paired_evidence.confidence == 2.0  # type: ignore[attr-defined]
        assert rules["paired"].paired_evidence.confidence is None  # type: ignore[attr-defined]


def test_the_tuned_winner_is_the_reference_and_final_figures_compare_like_with_like(tmp_path: Path) -> None:
    import json

    from bench.loo_scores import protocols

    folder = _folder(tmp_path)
    # At 4096 x 8192 the tuner's screen read OTHER at 9.0, below every final time (10.0,
    # 10.1): a shorter measurement of another kind, not a config faster than the winner.
    path = next(p for p in folder.iterdir() if json.loads(p.read_text())["key"] == key(4096))
    data = json.loads(path.read_text())
    data["provenance"]["timing_protocol"]["screen"] = {
        "launches_per_sample": 4, "warmup": 1, "samples": 5, "group_size": 16, "finalists": 2}
    for candidate in data["candidates"]:
        candidate["timed_in"] = "final"
        if candidate["config"] == OTHER:
            candidate["timing"] = {**candidate["timing"], "median_us": 9.0, "p20_us": 8.91, "p80_us": 9.09, "samples": 5,
                                   "min_us": 8.82}
            candidate["timed_in"] = "screen"
    path.write_text(json.dumps(data))
    tuned = measured(folder, "rmsnorm", SPEC)["NVIDIA H200"]
    rows = leave_one_out(SPEC, tuned, None, "key")
    at_4096 = next(r for r in rows if r["key"] == key(4096))
    assert at_4096["winner"]["config"] == FAST_HERE and at_4096["winner"]["ratio"] == 10.0 / 9.0
    assert at_4096["winner"]["final_ratio"] == 1.0, "over the best final, the tuned winner is the best"
    assert at_4096["nearest"]["final_ratio"] == 10.1 / 10.0  # FAST_AROUND, timed in the final
    stats = summary(rows)
    assert stats["winner"]["final"]["n"] == 5 and stats["winner"]["final"]["geomean"] == 1.0
    gap = protocols(tuned)
    assert (gap["keys"], gap["best_is_a_screen"], gap["lowest"]) == (1, 1.0, 0.9)


def test_a_result_file_is_scored_again_from_its_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from bench.loo_scores import main

    tuned = measured(_folder(tmp_path), "rmsnorm", SPEC)["NVIDIA H200"]
    rows = leave_one_out(SPEC, tuned, None, "key")
    result = tmp_path / "loo.json"
    result.write_text(json.dumps({"rows": {"rmsnorm": {"NVIDIA H200": {"key": rows}}}}))
    assert main([str(result)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("rmsnorm on NVIDIA H200, hiding each key: ")
    assert json.loads(line.split(": ", 1)[1])["nearest"] == summary(rows)["nearest"]
    assert main([]) == 2
