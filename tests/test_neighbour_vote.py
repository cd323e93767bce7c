"""A family's neighbourhood rule (``choose_from_neighbours``) in the nearest-key step, and
RMSNorm's vote: it serves a config the device measured well at the tuned keys around the
asked one over a nearer key's winner that was slow at the others, only what the
registry's checks accept, only from neighbours of the step's standing; a rule that fails
is reported once and the nearer key's winner is served."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from factories import H200, artifact_dict
from flyconfigs.cli import main
from flyconfigs.kernels.neighbour_vote import NeighbourVote, VotesAmongNeighbours
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.kernels.rmsnorm.declaration import RMSNormSpec
from flyconfigs.registry import Resolver, explain, resolve
from flyconfigs.registry.declarations import check_config
from flyconfigs.registry.search.neighbourhood import Neighbour
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import Artifact, write_atomic

H200_SPEC = "sm90:132:NVIDIA H200"
QUERY = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())
SM90 = Path(__file__).resolve().parents[1] / "artifacts" / "sm90"
BASE = {"threads": 256, "rows_per_block": 1, "vector_bytes": 16, "occupancy": 0}
FAST_HERE = {**BASE, "row_storage": "reg"}
"""The winner at M = 4096 only, and 40% slower at the other neighbours."""
FAST_AROUND = {**BASE, "row_storage": "smem"}
"""1% behind the winner at M = 4096 and the winner at every other neighbour."""
OTHER = {**BASE, "threads": 512, "row_storage": "reg"}


def key(m: int, n: int = 8192) -> dict[str, Any]:
    return {"M": m, "N": n, "dtype": "bf16", "weight_dtype": "bf16"}


def _tuned(folder: Path, k: dict[str, Any], timed: list[tuple[dict[str, Any], float]]) -> Path:
    """An artifact at ``k`` that timed ``timed`` (config, median µs); the fastest wins."""
    data = artifact_dict(device=H200, key=k)
    template = data["candidates"][0]
    data["candidates"] = [{**template, "config": c, "timing": {
        **template["timing"], "median_us": t, "p20_us": t * 0.99, "p80_us": t * 1.01, "min_us": t * 0.98}}
        for c, t in timed]
    best = min(data["candidates"], key=lambda c: c["timing"]["median_us"])
    data["winner"] = {"config": best["config"], "timing": best["timing"]}
    data["default"] = {"config": best["config"], "timing": best["timing"]}
    artifact = Artifact.model_validate(data)
    path = folder / artifact.file_name()
    write_atomic(path, artifact.to_json_bytes())
    return path


@pytest.fixture
def pool(tmp_path: Path) -> Path:
    """Tuned keys at M = 4096 (the nearest to M = 3000), 2048 and 8192 (within one log2
    step of it), N = 8192: the nearest key's winner is slow at the other two."""
    folder = tmp_path / "tuned"
    _tuned(folder, key(4096), [(FAST_HERE, 10.0), (FAST_AROUND, 10.1), (OTHER, 12.0)])
    _tuned(folder, key(2048), [(FAST_HERE, 7.0), (FAST_AROUND, 5.0), (OTHER, 6.0)])
    _tuned(folder, key(8192), [(FAST_HERE, 28.0), (FAST_AROUND, 20.0), (OTHER, 24.0)])
    return folder


_KEPT: list[object] = []


class _Nearest(RMSNormSpec):
    """RMSNorm without its neighbourhood rule."""

    def choose_from_neighbours(self, asked: Mapping[str, Any], neighbours: Iterable[Neighbour],
                               device: DeviceQuery) -> None:
        return None


class _Voting(RMSNormSpec):
    """RMSNorm with the neighbourhood vote as its rule (the family's own rule is the
    paired one of :mod:`flyconfigs.kernels.paired_evidence`)."""

    choose_from_neighbours = VotesAmongNeighbours.choose_from_neighbours
    neighbour_vote = NeighbourVote()


VOTING = _Voting()


class _Answering(RMSNormSpec):
    """RMSNorm whose rule answers ``answer`` (or raises it), reading the neighbours first."""

    def __init__(self, answer: Any) -> None:
        super().__init__()
        object.__setattr__(self, "answer", answer)

    def choose_from_neighbours(self, asked: Mapping[str, Any], neighbours: Iterable[Neighbour],
                               device: DeviceQuery) -> Any:
        list(neighbours)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_the_vote_serves_a_config_fast_around_the_key_over_the_nearest_winner(pool: Path) -> None:
    resolver = Resolver([str(pool)], detector=None)
    today = resolver.resolve(_Nearest(), key(3000), H200_SPEC)
    assert dict(today.config) == FAST_HERE and today.neighbourhood is None
    r = resolver.resolve(VOTING, key(3000), H200_SPEC)
    assert dict(r.config) == {**FAST_AROUND, "cluster": 1, "cache_hints": "none"} or dict(r.config) == FAST_AROUND
    assert (r.key_match, dict(r.matched_key or {})) == ("nearest", key(4096))
    hood = r.neighbourhood
    assert hood is not None and not hood.default
    assert [dict(k)["M"] for k in hood.neighbours] == [4096, 2048, 8192]
    assert [dict(k)["M"] for k in hood.timed_at] == [4096, 2048, 8192]
    assert [dict(k)["M"] for k in hood.winner_at] == [2048, 8192]
    assert any("neighbourhood rule chose" in reason for reason in r.reasons)
    assert r.as_json()["neighbourhood"]["winner_at"] == [key(2048), key(8192)]  # type: ignore[index]


def test_a_neighbour_beyond_reach_does_not_vote(pool: Path) -> None:
    # From M = 3000, M = 8192 is 1.45 log2 steps away, within 1.0 of the nearest (0.45);
    # with a reach of 0.5 only 4096 and 2048 vote, and 2048 alone still outvotes 4096.
    near = [Neighbour(key(m), (d,), FAST_HERE, ((FAST_HERE, t1), (FAST_AROUND, t2)), "")
            for m, d, t1, t2 in ((4096, 0.45, 10.0, 10.1), (2048, 0.55, 7.0, 5.0), (8192, 1.45, 5.0, 50.0))]
    chosen = NeighbourVote(reach=0.5).choose(SPEC, key(3000), iter(near), QUERY)
    assert chosen is not None and chosen[0]["row_storage"] == "smem" and "2 tuned key(s)" in chosen[1]
    # Within the default reach the far key votes too, weighted least, and FAST_AROUND's
    # tenfold loss there outweighs what it gains at the two nearer keys.
    assert NeighbourVote().choose(SPEC, key(3000), iter(near), QUERY)[0]["row_storage"] == "reg"  # type: ignore[index]
    near[2] = Neighbour(key(8192), (1.45,), FAST_HERE, ((FAST_HERE, 5.0), (FAST_AROUND, 5.2)), "")
    only_near = NeighbourVote(most=1).choose(SPEC, key(3000), iter(near), QUERY)
    assert only_near is not None and only_near[0]["row_storage"] == "reg" and "1 tuned key(s)" in only_near[1]


def test_the_vote_never_offers_a_config_the_checks_refuse() -> None:
    # The nearest key's fastest config reads 16-byte vectors, which do not divide a row of
    # 1020 bf16 elements: the vote passes it over for one that fits, never serves it.
    wide, narrow = {**FAST_HERE, "threads": 64}, {**FAST_HERE, "threads": 64, "vector_bytes": 8}
    assert check_config(SPEC, wide, key(3000, 1020), QUERY) is not None
    near = [Neighbour(key(4096, 1024), (0.45,), wide, ((wide, 5.0), (narrow, 5.5)), "")]
    chosen = NeighbourVote().choose(SPEC, key(3000, 1020), iter(near), QUERY)
    assert chosen is not None and chosen[0]["vector_bytes"] != 16
    assert check_config(SPEC, chosen[0], key(3000, 1020), QUERY) is None


def test_what_is_served_off_the_grid_passes_the_checks_on_the_committed_artifacts() -> None:
    resolver = Resolver([str(SM90)], detector=None, packages=False)
    rng = random.Random(54)
    chosen = 0
    for _ in range(5):
        asked = {"M": rng.randint(1, 70000), "N": rng.randint(64, 20000), "dtype": rng.choice(["bf16", "fp16", "fp32"])}
        asked["weight_dtype"] = asked["dtype"]
        for device in ("sm90:132:NVIDIA H100 80GB HBM3", H200_SPEC):
            r = resolver.resolve("rmsnorm", asked, device)
            assert check_config(SPEC, r.config, asked, r.device) is None, (asked, device, r.config)
            chosen += r.neighbourhood is not None
    assert chosen > 0


@pytest.mark.parametrize("answer", [RuntimeError("a bug in the rule"), "smem", ({}, 1), (FAST_AROUND,)])
def test_a_rule_that_fails_is_reported_once_and_the_nearest_winner_served(pool: Path, answer: Any) -> None:
    resolver = Resolver([str(pool)], detector=None)
    family = _Answering(answer)
    _KEPT.append(family)  # faults are remembered by the declaration's id: none may be reused
    for m in (3000, 3100, 2900):
        r = resolver.resolve(family, key(m), H200_SPEC)
        assert dict(r.config) == FAST_HERE and r.neighbourhood is None
    faults = [p for p in resolver.problems.problems() if p.kind == "kernel-error" and "choose_from_neighbours" in p.message]
    assert len(faults) == 1


def test_a_chosen_config_the_checks_refuse_is_never_served(pool: Path, caplog: pytest.LogCaptureFixture) -> None:
    refused = {**FAST_HERE, "threads": 1024, "rows_per_block": 32}  # a block of 32768 threads
    assert check_config(SPEC, refused, key(3000), QUERY) is not None
    resolver = Resolver([str(pool)], detector=None)
    with caplog.at_level(logging.WARNING, logger="flyconfigs"):
        r = resolver.resolve(_Answering((refused, "it looked fast")), key(3000), H200_SPEC)
    assert dict(r.config) == FAST_HERE and r.neighbourhood is None
    assert any("which the checks refuse" in p.message for p in resolver.problems.problems())


def test_only_neighbours_of_the_served_standing_are_offered(pool: Path, site: Any, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    # A package (a lower standing) holds a nearer key whose timings favour OTHER: the
    # folder's keys serve, and only they vote.
    packaged = tmp_path / "packaged"
    _tuned(packaged, key(3100), [(OTHER, 1.0), (FAST_HERE, 9.0), (FAST_AROUND, 9.0)])
    site.install("sm90", [Artifact.model_validate_json(p.read_bytes()) for p in packaged.glob("*.json")])
    monkeypatch.setenv("FLYCONFIGS_PATH", str(pool))
    from flyconfigs.registry import refresh

    refresh()
    r = resolve(VOTING, key(3000), H200_SPEC)
    assert r.source == "override" and r.neighbourhood is not None
    assert [dict(k)["M"] for k in r.neighbourhood.neighbours] == [4096, 2048, 8192]
    assert r.config["row_storage"] == "smem"
    package_only = resolve(VOTING, key(3100), H200_SPEC)
    assert package_only.key_match == "exact" and package_only.source == "package"


def test_explain_prints_the_rule_and_its_reason(pool: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FLYCONFIGS_PATH", str(pool))
    from flyconfigs.registry import refresh

    refresh()
    try:
        _, steps = explain(VOTING, key(3000), H200_SPEC)
        assert "rmsnorm's neighbourhood rule chose" in steps[-1].outcome
        assert "the winner at M=2048" in steps[-1].outcome
        assert "lowest weighted mean log time" in steps[-1].outcome
        # The family's own rule: no neighbour timed its default, so the default serves, and
        # explain says why.
        assert main(["explain", "rmsnorm", "M=3000", "N=8192", "dtype=bf16", "weight_dtype=bf16", "--device", H200_SPEC]) == 0
        out = capsys.readouterr().out
        assert "neighbourhood rule chose" in out and "the family's default: no candidate was timed with it" in out
    finally:
        monkeypatch.delenv("FLYCONFIGS_PATH")
        refresh()
