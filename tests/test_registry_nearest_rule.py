"""A family's own nearest-key rule (``key_distance``) and its veto of a nearer key's
winner (``pass_over_neighbour``), as the resolver's nearest-key step uses them; a rule
that raises is the plugin's fault, reported once, and never breaks serving."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from factories import H200, make_artifact
from flyconfigs.registry import KernelDecl, KeyAxis, Resolver
from flyconfigs.registry.families.nearest import log_distance
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import write_atomic

H200_SPEC = "sm90:132:NVIDIA H200"
KEY = {"M": 2000, "dtype": "bf16"}
DEFAULT = {"threads": 1, "rows_per_block": 1, "vector_bytes": 0, "row_storage": "reg", "occupancy": 0}


class _Family(KernelDecl):
    """A served-only family keyed by an ordinal ``M`` and an exact ``dtype``; its configs
    are RMSNorm-shaped so the shared factories make its artifacts."""

    name = "toy_moe"
    version = 1
    key_axes = (KeyAxis("M", int, ordinal=True, minimum=1), KeyAxis("dtype", str))

    def default_config(self, key: Mapping[str, Any], device: DeviceQuery | None) -> dict[str, Any]:
        return dict(DEFAULT)


class _Absolute(_Family):
    """vLLM's distance: the nearest by absolute difference, a tie to the smaller entry."""

    def key_distance(self, asked: Mapping[str, Any], tuned: Mapping[str, Any]) -> tuple[float, ...] | None:
        return (abs(asked["M"] - tuned["M"]), tuned["M"])


class _Nothing(_Family):
    def key_distance(self, asked: Mapping[str, Any], tuned: Mapping[str, Any]) -> tuple[float, ...] | None:
        return None


class _Raising(_Family):
    def key_distance(self, asked: Mapping[str, Any], tuned: Mapping[str, Any]) -> tuple[float, ...] | None:
        raise RuntimeError("a bug in the plugin")


class _PassOverSmall(_Family):
    def pass_over_neighbour(self, asked: Mapping[str, Any], tuned: Mapping[str, Any], config: Mapping[str, Any],
                            device: DeviceQuery) -> str | None:
        return "too far below the asked M" if tuned["M"] < asked["M"] // 2 + 1 else None


def _folder(tmp_path: Path, *ms: int) -> tuple[Path, dict[int, dict[str, Any]]]:
    folder = tmp_path / "tuned"
    winners = {}
    for i, m in enumerate(ms):
        artifact = make_artifact(device=H200, key={"M": m, "dtype": "bf16"}, kernel="toy_moe", winner_index=i + 1)
        write_atomic(folder / artifact.file_name(), artifact.to_json_bytes())
        winners[m] = dict(artifact.winner.config)
    return folder, winners


def test_the_default_rule_is_the_log_distance_with_a_tie_to_the_larger(tmp_path: Path) -> None:
    folder, winners = _folder(tmp_path, 1000, 3000)
    r = Resolver([str(folder)], detector=None).resolve(_Family(), KEY, H200_SPEC)
    # log2(3000/2000) < log2(2000/1000): 3000 is nearer by the default rule.
    assert (r.key_match, dict(r.matched_key or {})) == ("nearest", {"M": 3000, "dtype": "bf16"})
    assert dict(r.config) == winners[3000]
    axes = _Family.key_axes
    assert log_distance(axes, {"M": 64, "dtype": "x"}, {"M": 128, "dtype": "x"}) == (1.0, -128.0)
    assert log_distance(axes, {"M": 64, "dtype": "x"}, {"M": 32, "dtype": "x"}) == (1.0, -32.0)
    assert _Family().key_distance({"M": 64, "dtype": "x"}, {"M": 128, "dtype": "x"}) == (1.0, -128.0)


def test_a_family_rule_ranks_the_neighbours(tmp_path: Path) -> None:
    folder, winners = _folder(tmp_path, 1000, 3000)
    r = Resolver([str(folder)], detector=None).resolve(_Absolute(), KEY, H200_SPEC)
    # |2000 - 1000| == |2000 - 3000|: the tie goes to the smaller tuned M, as vLLM serves it.
    assert dict(r.matched_key or {}) == {"M": 1000, "dtype": "bf16"}
    assert dict(r.config) == winners[1000]
    near = Resolver([str(folder)], detector=None).resolve(_Absolute(), {"M": 2600, "dtype": "bf16"}, H200_SPEC)
    assert dict(near.matched_key or {})["M"] == 3000


def test_a_neighbour_the_rule_answers_none_for_is_never_served(tmp_path: Path) -> None:
    folder, _ = _folder(tmp_path, 1000, 3000)
    resolver = Resolver([str(folder)], detector=None)
    r = resolver.resolve(_Nothing(), KEY, H200_SPEC)
    assert (r.source, r.key_match, dict(r.config)) == ("default", "none", DEFAULT)
    exact = resolver.resolve(_Nothing(), {"M": 1000, "dtype": "bf16"}, H200_SPEC)
    assert exact.key_match == "exact", "the rule is asked only in the nearest-key step"


def test_a_raising_rule_is_reported_once_and_serves_the_default(tmp_path: Path) -> None:
    folder, _ = _folder(tmp_path, 1000, 3000)
    resolver = Resolver([str(folder)], detector=None)
    family = _Raising()
    for m in (1500, 2000, 2500):
        r = resolver.resolve(family, {"M": m, "dtype": "bf16"}, H200_SPEC)
        assert r.source == "default"
    from flyconfigs.registry import declarations

    faults = [p for p in [*resolver.problems.problems(), *declarations.PROBLEMS.problems()]
              if p.kind == "kernel-error" and "key_distance" in p.message]
    assert len(faults) == 1 and "RuntimeError" in faults[0].message


def test_a_passed_over_neighbour_gives_way_to_the_next_and_says_why(tmp_path: Path) -> None:
    folder, winners = _folder(tmp_path, 900, 5000)
    resolver = Resolver([str(folder)], detector=None)
    # By log distance 900 (1.15 steps) is nearer than 5000 (1.32 steps), but the family passes it over.
    r = resolver.resolve(_PassOverSmall(), KEY, H200_SPEC)
    assert dict(r.matched_key or {})["M"] == 5000 and dict(r.config) == winners[5000]
    assert any("too far below the asked M" in reason for reason in r.reasons)
    _, steps = resolver.explain(_PassOverSmall(), KEY, H200_SPEC)
    assert any("too far below the asked M" in step.outcome for step in steps)
    only_small, _ = _folder(tmp_path / "small", 900)
    fallback = Resolver([str(only_small)], detector=None).resolve(_PassOverSmall(), KEY, H200_SPEC)
    assert fallback.source == "default"
    assert any("too far below the asked M" in reason for reason in fallback.reasons)


@pytest.mark.parametrize("answer", [[1.0], (1.0, "x"), (float("nan"),), 3])
def test_a_rule_answering_the_wrong_type_counts_as_none(tmp_path: Path, answer: object) -> None:
    folder, _ = _folder(tmp_path, 1000)

    class _Odd(_Family):
        def key_distance(self, asked: Mapping[str, Any], tuned: Mapping[str, Any]) -> tuple[float, ...] | None:
            return answer  # type: ignore[return-value]

    assert Resolver([str(folder)], detector=None).resolve(_Odd(), KEY, H200_SPEC).source == "default"
