"""bench/launch_overhead.py times the eager path a decoding step takes (M ≤ 16 at model
sizes, host time included) and says per shape whether the op is no slower than torch's:
the shapes and that verdict are checked here, on the CPU."""

from __future__ import annotations

from bench.launch_overhead import FUSED_OP, FUSED_PEER, OP, PEER, SHAPES, shape_summary


def test_the_shapes_cover_few_rows_at_model_sizes_and_keep_the_earlier_ones() -> None:
    assert {(m, n) for m in (1, 4, 16) for n in (2880, 4096, 7168)} <= set(SHAPES)
    assert {(16, 3584), (16, 16384)} <= set(SHAPES) and all(m <= 16 for m, _ in SHAPES)
    assert len(set(SHAPES)) == len(SHAPES)


def _q(median: float) -> dict[str, float]:
    return {"median": median, "p20": median * 0.99, "p80": median * 1.01, "n": 15}


def test_the_summary_says_per_shape_whether_the_op_is_no_slower_than_torch() -> None:
    results = {
        "1x2880": {OP: _q(9.0), PEER: _q(10.0), "empty_torch_op": _q(2.0)},
        "4x2880": {OP: _q(10.0), PEER: _q(10.0)},
        "16x7168": {OP: _q(10.5), PEER: _q(10.0)},
        "16x4096": {PEER: _q(10.0)},  # the op was not timed there: no verdict
    }
    summary = shape_summary(results)
    assert summary == {"1x2880": {"ratio": 0.9, "no_slower": True}, "4x2880": {"ratio": 1.0, "no_slower": True},
                       "16x7168": {"ratio": 1.05, "no_slower": False}}
    fused = shape_summary({"1x4096": {FUSED_OP: _q(12.0), FUSED_PEER: _q(8.0)}}, FUSED_OP, FUSED_PEER)
    assert fused == {"1x4096": {"ratio": 1.5, "no_slower": False}}
