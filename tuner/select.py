"""Honest selection: the fastest candidate wins only if it beats the default beyond the
measured noise band; otherwise the default is kept.

The noise band is the larger relative p20–p80 half-width of the two measurements, and
never less than :data:`MIN_NOISE`.  Candidates within the band of the fastest are
near-ties: the caller re-measures them (with the default) before deciding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flyconfigs.schema.models import Timing

__all__ = ["MIN_NOISE", "Decision", "decide", "near_ties", "noise_band"]

MIN_NOISE = 0.01


@dataclass(frozen=True)
class Decision:
    """The winner's index among the timed candidates and why."""

    winner: int
    noise_band: float
    kept_default: bool


def noise_band(a: Timing, b: Timing) -> float:
    """The relative band within which ``a`` and ``b`` cannot be told apart."""
    return max(MIN_NOISE, a.noise, b.noise)


def near_ties(timings: Sequence[Timing]) -> list[int]:
    """Indices whose median is within the noise band of the fastest (fastest first)."""
    order = sorted(range(len(timings)), key=lambda i: timings[i].median_us)
    best = timings[order[0]]
    return [i for i in order if timings[i].median_us <= best.median_us * (1 + noise_band(best, timings[i]))]


def decide(configs: Sequence[Mapping[str, Any]], timings: Sequence[Timing], default_index: int) -> Decision:
    """Pick the winner among ``configs`` (timed as ``timings``, the default at
    ``default_index``): the fastest, unless it does not beat the default by more than
    the noise band."""
    fastest = min(range(len(timings)), key=lambda i: timings[i].median_us)
    default = timings[default_index]
    band = noise_band(timings[fastest], default)
    if fastest != default_index and timings[fastest].median_us < default.median_us * (1 - band):
        return Decision(fastest, band, False)
    return Decision(default_index, band, fastest != default_index)
