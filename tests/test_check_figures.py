"""The figures of record: every figure ``bench/figures.json`` registers is quoted on its
page as registered and its result file holds it, so a page edited without its result (or
a result re-run without its page) fails here, the day it happens."""

from __future__ import annotations

import json

from bench.check_figures import REGISTRY, check, missing_needs, moved


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
