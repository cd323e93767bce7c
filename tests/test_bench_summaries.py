"""What the kernel benchmarks read from a run, checked on the CPU with made-up timings: the
grids they time (``--grid``, the families' presets), the best peer per shape, and the
summary figures the performance goals are stated in."""

from __future__ import annotations

from typing import Any

import pytest

from bench import fused_add_rmsnorm, rmsnorm

NAMES = {"F_rms_norm": "F.rms_norm", "torch_compile": "torch.compile", "flyconfigs_default": "flyconfigs-default"}


def _res(**medians: float) -> dict[str, dict[str, float]]:
    """Results by contender (``torch_compile`` for torch.compile, …): a median and the
    bandwidth it implies for 1 GB moved."""
    return {NAMES.get(name, name): {"median_us": us, "bandwidth_gbps": 1e6 / us} for name, us in medians.items()}


def test_both_benchmarks_time_the_models_and_unseen_grids_when_asked() -> None:
    assert len(rmsnorm.grid(False, ["models"])) == 108
    assert len(fused_add_rmsnorm.grid(False, ["models", "unseen"])) == 108 + 28
    assert fused_add_rmsnorm.grid(False) == fused_add_rmsnorm.grid(False, None)
    assert len(fused_add_rmsnorm.grid(False)) == 68, "the default grid is the one the figures of record used"
    assert (1, 2880, "bf16", "bf16") in fused_add_rmsnorm.grid(False, ["M=1 N=2880 dtype=bf16"])
    assert len(fused_add_rmsnorm.grid(True, ["models"])) == 6


def _rms_row(m: int, traffic: float, flyconfigs: float, best: float, copy: float) -> dict[str, Any]:
    row = {"M": m, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16", "traffic_bytes": traffic,
           "results": _res(flyconfigs=flyconfigs, F_rms_norm=2 * flyconfigs, liger=best, quack=best * 1.5, copy=copy)}
    row["ratios"] = rmsnorm.row_ratios(row)
    return row


def test_the_rmsnorm_summary_names_the_shapes_below_097_of_the_best_peer_and_scores_big_ones_against_the_copy() -> None:
    rows = [_rms_row(1, 1e6, 10.0, 10.0, 5.0), _rms_row(2, 1e6, 10.0, 9.0, 5.0), _rms_row(3, 1e6, 10.0, 9.6, 5.0),
            _rms_row(4, 3e8, 100.0, 100.0, 96.0), _rms_row(5, 3e8, 100.0, 100.0, 98.0)]
    summary = rmsnorm.run_summary(rows)
    assert summary["shapes_below_0.97_of_best_peer"] == 2 and summary["shapes_at_least_0.97_of_best_peer"] == 3
    assert [s["M"] for s in summary["below_0.97_of_best_peer"]] == [2, 3]  # the worst first
    assert summary["below_0.97_of_best_peer"][0]["speedup"] == pytest.approx(0.9)
    assert summary["min_speedup_vs_best_peer"] == pytest.approx(0.9)
    assert summary["shapes_at_256MB_or_more"] == 2
    assert summary["min_fraction_of_copy_at_256MB_or_more"] == pytest.approx(0.96)
    assert summary["shapes_at_256MB_or_more_at_least_0.97_of_copy"] == 1
    assert summary["flyconfigs_speedup_vs_F.rms_norm"] == pytest.approx(2.0)


def _fused_row(m: int, excluded: dict[str, str] | None = None, **medians: float) -> dict[str, Any]:
    res = _res(**medians)
    row: dict[str, Any] = {"M": m, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16", "served_from": "package",
                           "results": res, "best_peer": fused_add_rmsnorm.best_peer(res),
                           **({"excluded": excluded} if excluded else {})}
    row["ratios"] = fused_add_rmsnorm.row_ratios(row)
    return row


def test_the_fused_benchmark_takes_quack_as_a_peer_and_summarizes_against_the_best() -> None:
    assert "quack" in fused_add_rmsnorm.PEERS
    rows = [
        _fused_row(1, flyconfigs=10.0, flyconfigs_default=11.0, torch_compile=12.0, quack=9.0, copy=5.0),
        _fused_row(2, {"quack": "raised RuntimeError: N not supported"},
                   flyconfigs=10.0, flyconfigs_default=10.0, torch_compile=10.0, copy=5.0),
        _fused_row(3, flyconfigs=10.0, flyconfigs_default=10.0, torch_compile=9.6, copy=5.0),
    ]
    assert [r["best_peer"] for r in rows] == ["quack", "torch.compile", "torch.compile"]
    summary = fused_add_rmsnorm.run_summary(rows)
    assert summary["min_speedup_vs_best_peer"] == pytest.approx(0.9)
    assert summary["worst_shape"] == {"M": 1, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
    assert summary["shapes_below_0.95_of_best_peer"] == 1
    assert summary["flyconfigs_speedup_vs_best_peer"] == pytest.approx((0.9 * 1.0 * 0.96) ** (1 / 3))
    assert summary["flyconfigs_speedup_vs_torch.compile"] == pytest.approx((1.2 * 1.0 * 0.96) ** (1 / 3))
    assert summary["flyconfigs-default_speedup_vs_best_peer"] == pytest.approx((9.0 / 11.0 * 1.0 * 0.96) ** (1 / 3))
    assert summary["excluded"] == {"quack: raised RuntimeError: N not supported": 1}
    assert summary["shapes"] == 3 and summary["served_from"] == ["package"]
    assert fused_add_rmsnorm.best_peer(_res(flyconfigs=1.0)) is None
