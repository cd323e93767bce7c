"""How bench/neighbour_vote.py scores a served config at a hidden key, and each rule over
the hidden keys: its time over the best the key's tuning recorded, and like with like,
over the best final time where the key's final timed it (the best recorded can be a
screen time: :func:`protocols` says how often, per card).  Run alone, it scores the rows a
result file holds again and prints the figures, per kernel, card and way of hiding:

    python -m bench.loo_scores bench/results/neighbour-vote-loo.json
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flyconfigs.registry.plugin import config_token

if TYPE_CHECKING:
    from bench.neighbour_vote import Tuned

__all__ = ["OWN", "RULES", "WORSE", "figure", "figures", "geomean", "main", "protocols", "summary"]

WORSE = 1.03
RULES = ("default", "nearest", "vote", "paired", "paired-se", "sibling", "winner")
OWN = RULES[:5]
"""The rules that serve from the asked card's own tunings."""


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of ``values`` (not empty)."""
    return math.exp(sum(map(math.log, values)) / len(values))


def figure(t: Tuned, config: Mapping[str, Any], how: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The served config's time over the best recorded at the key (``ratio``) and, where the
    key timed it in its final protocol, over the best final there (``final_ratio``: like
    with like, ``None`` for a config only screened)."""
    slot = config_token(config, defaults)
    found = t.times.get(slot)
    final = t.best_final
    like = found / final if found is not None and final is not None and slot in t.finals else None
    return {"ratio": None if found is None else found / t.best, "final_ratio": like, "from": how,
            "config": dict(config)}


def figures(rows: list[dict[str, Any]], rule: str) -> dict[str, Any]:
    """Geomean over the best, keys more than 3% slower than the default, worst and
    untimed, for ``rule`` over ``rows``."""
    held = [r for r in rows if r.get(rule) is not None]
    ratios = [r[rule]["ratio"] for r in held if r[rule]["ratio"] is not None]
    worse = sum(1 for r in held if r[rule]["ratio"] is not None and r["default"]["ratio"] is not None
                and r[rule]["ratio"] > WORSE * r["default"]["ratio"])
    if not ratios:
        return {"keys": len(held), "n": 0}
    finals = [r[rule]["final_ratio"] for r in held if r[rule].get("final_ratio") is not None]
    both = [(r[rule]["final_ratio"], r["default"]["final_ratio"]) for r in held
            if r[rule].get("final_ratio") is not None and r["default"].get("final_ratio") is not None]
    return {"keys": len(held), "n": len(ratios), "untimed": len(held) - len(ratios),
            "geomean": round(geomean(ratios), 4),
            "worse_than_default": worse, "worst": round(max(ratios), 3),
            "within_3pct": round(sum(r <= WORSE for r in ratios) / len(ratios), 3),
            "final": {"n": len(finals), "geomean": round(geomean(finals), 4)
                      if finals else None, "worst": round(max(finals), 3) if finals else None,
                      "with_default": len(both), "worse_than_default": sum(1 for a, b in both if a > WORSE * b)}}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per rule over the keys its config was timed at, and ``common`` over the keys
    every own-device rule's config was timed at."""
    out: dict[str, Any] = {rule: figures(rows, rule) for rule in RULES}
    own = [r for r in rows if all(r[rule]["ratio"] is not None for rule in OWN)]
    out["common"] = {rule: figures(own, rule) for rule in OWN}
    both = [r for r in own if r["sibling"] is not None and r["sibling"]["ratio"] is not None]
    out["with_sibling"] = {rule: figures(both, rule) for rule in ("paired", "paired-se", "sibling")}
    return out


def protocols(tuned: Sequence[Tuned]) -> dict[str, Any]:
    """How the two protocols of the tuner read the same keys: over the keys that hold
    both, the geomean of the fastest screen time over the fastest final time, and the
    share of keys where some screen time is below every final one (the best recorded is
    then a screen time, a shorter measurement of another kind)."""
    gaps = [min(t.times[s] for s in t.times if s not in t.finals) / final for t in tuned
            if (final := t.best_final) is not None and any(s not in t.finals for s in t.times)]
    if not gaps:
        return {"keys": 0}
    return {"keys": len(gaps), "screen_over_final": round(geomean(gaps), 4),
            "best_is_a_screen": round(sum(g < 1 for g in gaps) / len(gaps), 3),
            "lowest": round(min(gaps), 3)}


def main(argv: list[str] | None = None) -> int:
    """Print the figures of every rule from the rows of the result file named."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.loo_scores RESULT.json", file=sys.stderr)
        return 2
    rows = json.loads(Path(args[0]).read_text())["rows"]
    for kernel, cards in rows.items():
        for card, modes in cards.items():
            for mode, hidden in modes.items():
                scored = summary(hidden)
                print(f"{kernel} on {card}, hiding each {mode}: " + json.dumps({r: scored[r] for r in RULES}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
