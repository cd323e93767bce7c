"""The timing protocol's summary of samples (the GPU part is tested on a GPU)."""

from __future__ import annotations

import pytest

from flyconfigs.tuner.timing import Measurement, summarize


def test_quantiles_interpolate_between_the_nearest_samples_as_numpy_does() -> None:
    # Sorted: 1, 2.5, 3, 3.5, 4, 7, 9.  The q quantile sits at position q * 6 (numpy's
    # default "linear" method): 0.2 -> 1.2, between 2.5 and 3; 0.8 -> 4.8, between 4 and 7.
    m = Measurement((7.0, 1.0, 4.0, 2.5, 9.0, 3.0, 3.5))
    expected = {0.2: 2.6, 0.25: 2.75, 0.5: 3.5, 0.8: 6.4, 0.99: 8.88}
    assert {q: m.quantile(q) for q in expected} == pytest.approx(expected, rel=1e-12)
    assert Measurement((1.0, 2.0, 3.0, 4.0, 5.0)).quantile(0.2) == pytest.approx(1.8)
    assert Measurement((6.0,)).quantile(0.8) == 6.0
    summary = summarize(m, 4000)
    assert summary["p20_us"] <= summary["median_us"] == 3.5 <= summary["p80_us"] and summary["min_us"] == 1.0


@pytest.mark.parametrize("q", [0.0, 1.0, 0.123, -0.2])
def test_a_quantile_that_is_not_a_whole_percentile_is_refused(q: float) -> None:
    with pytest.raises(ValueError, match="whole percentile"):
        Measurement((1.0, 2.0)).quantile(q)


def test_a_quantile_never_leaves_the_samples_it_lies_between() -> None:
    # Five samples timed on an H100 whose two smallest are equal: statistics' interpolation
    # put the p20 an ulp below them, and the artifact's timing (min <= p20) was refused.
    samples = (1.4797315101495525, 1.480805393833442, 1.4771544093253628, 1.4771544093253628, 1.4775838427895667)
    summary = summarize(Measurement(samples), 24576)
    assert summary["p20_us"] == min(samples) == summary["min_us"]
    assert summary["min_us"] <= summary["p20_us"] <= summary["median_us"] <= summary["p80_us"]
