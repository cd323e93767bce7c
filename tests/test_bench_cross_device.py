"""``bench/cross_device.py`` and ``bench/cross_device_gpu.py`` on a few of the committed
H200 and H100 tunings: a borrowed winner is scored by the other card's recorded time of
it, a held-out region borrows the registry's nearest key left in, the model is fitted on
the fitting card alone, and the GPU script asks for exactly the picks no final timed."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from bench.cross_device import METHODS, cross_check, summarize
from bench.cross_device_gpu import wanted
from flyconfigs.kernels.rmsnorm.ridge import KeyRows, key_rows
from flyconfigs.registry.core.products import find_product
from flyconfigs.schema.canonical import canonical_text
from flyconfigs.schema.pack import folder_artifacts

SM90 = Path(__file__).resolve().parent.parent / "artifacts" / "sm90"
H200, H100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"
KEYS = {(m, n) for m in (1, 4096) for n in (4096, 8192, 16384)}


@functools.cache
def _rows() -> dict[str, list[KeyRows]]:
    """Both cards' bf16 tunings of :data:`KEYS`, their features on the catalog's descriptor."""
    out: dict[str, list[KeyRows]] = {H200: [], H100: []}
    for artifact in folder_artifacts(SM90, "rmsnorm"):  # the packs' rows, candidates included
        if artifact.key["dtype"] != "bf16" or artifact.key["weight_dtype"] != "bf16":
            continue
        if (artifact.key["M"], artifact.key["N"]) in KEYS and artifact.selection.rule != "predicted":
            product = find_product(artifact.device.product or "")
            assert product is not None
            out[str(artifact.device.product)].append(key_rows(artifact, product.device))
    assert all(len(v) == len(KEYS) for v in out.values())
    return out


def _recorded(rows: KeyRows, config: object) -> float:
    wanted_text = canonical_text(dict(config))  # type: ignore[call-overload]
    entry = next(c for c in rows.artifact.candidates if canonical_text(dict(c.config)) == wanted_text)
    assert entry.timing is not None and rows.artifact.winner.timing is not None
    return entry.timing.median_us / rows.artifact.winner.timing.median_us


@pytest.mark.slow
def test_every_key_scores_the_borrowed_winner_by_the_other_cards_recorded_time() -> None:
    rows = _rows()
    per_key, weight = cross_check(rows[H200], rows[H100], None)
    assert len(per_key) == len(KEYS) and weight > 0
    h200 = {canonical_text(dict(r.artifact.key)): r.artifact for r in rows[H200]}
    for row, target in zip(per_key, rows[H100], strict=True):
        lender = h200[canonical_text(row["key"])]
        assert row["borrowed"]["config"] == dict(lender.winner.config)
        assert row["borrowed"]["ratio"] == _recorded(target, lender.winner.config)
        assert row["predicted"]["ratio"] == _recorded(target, row["predicted"]["config"]) >= 0.9
    summary = summarize(per_key)
    assert set(summary) == set(METHODS)
    assert summary["borrowed"]["timed"] == len(KEYS) and summary["borrowed"]["untimed"] == []


@pytest.mark.slow
def test_a_held_out_region_is_predicted_from_the_rest_and_borrows_the_nearest_key_left_in() -> None:
    rows = _rows()
    per_key, _ = cross_check(rows[H100], rows[H200], lambda key: int(key["N"]) >= 12288)
    assert sorted((r["key"]["M"], r["key"]["N"]) for r in per_key) == [(1, 16384), (4096, 16384)]
    for row in per_key:
        # N = 8192 is the nearest row length left in, at the same M.
        assert row["borrowed"]["from_key"] == {**row["key"], "N": 8192}


def test_the_gpu_script_asks_for_the_picks_no_final_timed_each_once() -> None:
    result = {"results": [
        {"scenario": "all", "fitted_on": H200, "predicted_for": H100, "per_key": [
            {"key": {"M": 1}, "winner": {"t": 1},
             "predicted": {"config": {"t": 2}, "ratio": 1.1, "timed_in": "screen"},
             "borrowed": {"config": {"t": 3}, "ratio": 1.0, "timed_in": "final"}},
            {"key": {"M": 2}, "winner": {"t": 1},
             "predicted": {"config": {"t": 4}, "ratio": None, "timed_in": None},
             "borrowed": {"config": {"t": 2}, "ratio": 1.2, "timed_in": "screen"}}]},
        {"scenario": "M<=16 held out", "fitted_on": H200, "predicted_for": H100, "per_key": [
            {"key": {"M": 1}, "winner": {"t": 1},
             "predicted": {"config": {"t": 2}, "ratio": 1.1, "timed_in": "screen"},
             "borrowed": {"config": None, "ratio": None, "timed_in": None}}]},
        {"scenario": "all", "fitted_on": H100, "predicted_for": H200, "per_key": [
            {"key": {"M": 1}, "winner": {"t": 1},
             "predicted": {"config": {"t": 9}, "ratio": None, "timed_in": None},
             "borrowed": {"config": {"t": 9}, "ratio": None, "timed_in": None}}]}]}
    asked = wanted(result, H100, ["predicted", "borrowed"], untimed_only=False)
    assert [(a["key"], a["config"]) for a in asked] == [({"M": 1}, {"t": 2}), ({"M": 2}, {"t": 4}),
                                                         ({"M": 2}, {"t": 2})]
    assert asked[0]["asked_by"] == [f"all / {H200} / predicted", f"M<=16 held out / {H200} / predicted"]
    assert [a["config"] for a in wanted(result, H100, ["predicted", "borrowed"], untimed_only=True)] == [{"t": 4}]
