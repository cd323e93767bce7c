"""The serving rule between tuned keys (:mod:`flyconfigs.kernels.paired_evidence`): the
family's default where the evidence is thin, a candidate where it beat the default
beyond the margin at the neighbours that timed both, never a winner carried past the
tuned range of an axis the family does not say transfers; and through the resolver,
the record and ``explain`` say which evidence decided."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flyconfigs.kernels.paired_evidence import PairedEvidence
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.registry import Resolver
from flyconfigs.registry.search.neighbourhood import Neighbour, config_token
from test_neighbour_vote import H200_SPEC, QUERY, _tuned, key

ASKED = key(3000)
DEFAULT = SPEC.default_config(ASKED, QUERY)
OTHER = {**DEFAULT, "threads": int(DEFAULT["threads"]) * 2}
SLOW = {**DEFAULT, "occupancy": 4 if DEFAULT["occupancy"] != 4 else 2}


def _slot(config: dict[str, Any]) -> Any:
    return config_token(config, SPEC.tunable_defaults)


def _near(m: int, distance: float, timed: list[tuple[dict[str, Any], float]], screened: tuple[dict[str, Any], ...] = (),
          n: int = 8192) -> Neighbour:
    ordered = tuple(sorted(((c, t) for c, t in timed), key=lambda ct: ct[1]))
    finals = frozenset(_slot(c) for c, _ in timed if c not in screened)
    return Neighbour(key(m, n), (distance,), ordered[0][0], ordered, "", defaults=SPEC.tunable_defaults,
                     finals=finals)


def test_the_candidates_are_valid_configs_of_the_asked_key() -> None:
    for config in (DEFAULT, OTHER, SLOW):
        assert SPEC.check_config(config, ASKED, QUERY) is None, config
    assert len({_slot(DEFAULT), _slot(OTHER), _slot(SLOW)}) == 3


def test_thin_evidence_serves_the_default() -> None:
    rule = PairedEvidence()
    # OTHER wins at both neighbours, but neither timed the default: nothing is paired.
    near = [_near(4096, 0.45, [(OTHER, 5.0), (SLOW, 6.0)]), _near(2048, 0.55, [(OTHER, 4.0), (SLOW, 5.0)])]
    config, reason = rule.choose(SPEC, ASKED, iter(near), QUERY, ("M",))  # type: ignore[misc]
    assert config == DEFAULT and "no candidate was timed with it" in reason
    # Timed with the default, OTHER is 1% faster: within the margin, the default serves.
    near = [_near(4096, 0.45, [(OTHER, 9.9), (DEFAULT, 10.0)]), _near(2048, 0.55, [(OTHER, 4.95), (DEFAULT, 5.0)])]
    config, reason = rule.choose(SPEC, ASKED, iter(near), QUERY, ("M",))  # type: ignore[misc]
    assert config == DEFAULT and "within the 1.5% margin" in reason
    # 2% faster, but timed in a screen only: a comparison with a screen timing needs 3%.
    near = [_near(4096, 0.45, [(OTHER, 9.8), (DEFAULT, 10.0)], screened=(OTHER,))]
    config, reason = rule.choose(SPEC, ASKED, iter(near), QUERY, ("M",))  # type: ignore[misc]
    assert config == DEFAULT and "screen timings" in reason and "within the 3.0% margin" in reason


def test_a_candidate_that_beat_the_default_where_both_were_timed_serves() -> None:
    near = [_near(4096, 0.45, [(OTHER, 9.0), (DEFAULT, 10.0), (SLOW, 12.0)]),
            _near(2048, 0.55, [(OTHER, 4.6), (DEFAULT, 5.0), (SLOW, 6.0)])]
    config, reason = PairedEvidence().choose(SPEC, ASKED, iter(near), QUERY, ("M",))  # type: ignore[misc]
    assert config == OTHER
    assert reason.startswith("paired evidence:") and "2 of 2 neighbour key(s), final timings" in reason
    assert "beyond the 1.5% margin" in reason
    # A wider margin than the advantage keeps the default.
    config, _ = PairedEvidence(margin=0.2).choose(SPEC, ASKED, iter(near), QUERY, ("M",))  # type: ignore[misc]
    assert config == DEFAULT


def test_no_winner_is_carried_past_the_tuned_range_of_n() -> None:
    asked = key(4096, 18432)
    default = SPEC.default_config(asked, QUERY)
    fast = {**default, "threads": int(default["threads"]) * 2}
    assert SPEC.check_config(fast, asked, QUERY) is None
    near = [_near(4096, 0.17, [(fast, 5.0), (default, 10.0)], n=16384),
            _near(2048, 1.17, [(fast, 3.0), (default, 6.0)], n=16384)]
    config, reason = PairedEvidence().choose(SPEC, asked, iter(near), QUERY, ("M",))  # type: ignore[misc]
    assert config == default and "N=18432 is above the largest tuned N near it (16384)" in reason
    # M transfers: past the largest tuned M the same evidence serves the candidate.
    asked_m = key(100000, 16384)
    default_m = SPEC.default_config(asked_m, QUERY)
    fast_m = next(c for c in SPEC.space(asked_m, QUERY) if _slot(c) != _slot(default_m))
    near = [_near(65536, 0.6, [(fast_m, 5.0), (default_m, 10.0)], n=16384)]
    config, _ = PairedEvidence().choose(SPEC, asked_m, iter(near), QUERY, ("M",))  # type: ignore[misc]
    assert _slot(config) == _slot(fast_m)
    config, reason = PairedEvidence().choose(SPEC, asked_m, iter(near), QUERY, ())  # type: ignore[misc]
    assert config == default_m and "M=100000 is above" in reason


def test_the_resolver_records_and_explains_the_evidence(tmp_path: Path) -> None:
    folder = tmp_path / "tuned"
    _tuned(folder, key(4096), [(OTHER, 9.0), (DEFAULT, 10.0), (SLOW, 12.0)])
    _tuned(folder, key(2048), [(OTHER, 4.6), (DEFAULT, 5.0), (SLOW, 6.0)])
    resolver = Resolver([str(folder)], detector=None, packages=False)
    r = resolver.resolve("rmsnorm", ASKED, H200_SPEC)
    assert _slot(dict(r.config)) == _slot(OTHER) and r.key_match == "nearest"
    assert r.neighbourhood is not None and r.neighbourhood.reason.startswith("paired evidence:")
    assert [dict(k)["M"] for k in r.neighbourhood.timed_at] == [4096, 2048]
    _, steps = resolver.explain("rmsnorm", ASKED, H200_SPEC)
    # RMSNorm's variance-aware test says how sure it is: the pairs' standard error and the margin.
    assert "paired evidence" in steps[-1].outcome and "standard error" in steps[-1].outcome


def test_a_triton_family_gets_the_rule_from_one_argument() -> None:
    from flyconfigs.kernels.triton_family import TritonFamily

    def launch(config: Any, x: Any, out: Any) -> None:
        raise AssertionError("not launched on the CPU")

    fields: dict[str, Any] = {"name": "scale_rows", "configs": {"BLOCK": (1024, 2048), "num_warps": (4, 8)},
                              "default": {"BLOCK": 1024, "num_warps": 4}, "launch": launch,
                              "reference": lambda x: x}
    asked = {"M": 3000, "N": 1000, "dtype": "fp32"}
    fast, default = {"BLOCK": 1024, "num_warps": 8}, {"BLOCK": 1024, "num_warps": 4}

    def near(m: int, distance: float) -> Neighbour:
        timed = ((fast, 5.0), (default, 6.0))
        return Neighbour({**asked, "M": m}, (distance,), fast, timed, "")

    plain = TritonFamily(**fields)
    assert plain.choose_from_neighbours(asked, iter([near(4096, 0.45)]), QUERY) is None  # the nearest winner serves
    family = TritonFamily(**fields, paired_evidence=PairedEvidence())
    chosen = family.choose_from_neighbours(asked, iter([near(4096, 0.45), near(2048, 0.55)]), QUERY)
    assert chosen is not None and chosen[0] == fast and chosen[1].startswith("paired evidence:")
    # No axis transfers unless the family says so: M = 8192 is past every tuned M.
    past = family.choose_from_neighbours({**asked, "M": 8192}, iter([near(4096, 1.0)]), QUERY)
    assert past is not None and past[0] == default and "M=8192 is above" in past[1]


def test_the_between_preset_names_keys_no_other_preset_or_artifact_names() -> None:
    import json

    from flyconfigs.kernels.fused_add_rmsnorm import SPEC as FUSED
    from flyconfigs.schema.jsonio import read_document
    from flyconfigs.schema.load import parse_pack
    from flyconfigs.tuner.grid import parse_grids
    from test_neighbour_vote import SM90

    # The keys every pack of the folder names (its rows' key cells; the measurements are
    # not read), and any single artifact file's.
    tuned = set()
    for path in sorted(SM90.glob("*.json")):
        document = read_document(path)
        if document.get("form") == "pack":
            pack, _ = parse_pack(document, str(path))
            for row in pack.rows:
                key = dict(zip(pack.columns.key, row, strict=True))
                tuned.add((pack.kernel.name, json.dumps(SPEC.complete_key(key), sort_keys=True)))
        elif "kernel" in document and "key" in document:
            tuned.add((document["kernel"]["name"], json.dumps(SPEC.complete_key(document["key"]), sort_keys=True)))
    assert len(tuned) > 1000
    for spec in (SPEC, FUSED):
        def keys(grid: tuple[str, ...], spec: Any = spec) -> set[str]:
            return {json.dumps(spec.complete_key(k), sort_keys=True) for k in parse_grids(grid, spec)}

        between = keys(spec.presets["between"])
        assert len(between) == 27
        for name, grid in spec.presets.items():
            assert name == "between" or not between & keys(grid), name
        assert not {(spec.name, k) for k in between} & tuned


CONFIDENT = PairedEvidence(margin=0.005, confidence=2.0)


def test_the_confident_test_weighs_the_spread_of_the_pairs() -> None:
    # One final pair 1% faster: within the noise band's standard error, the default serves.
    near = [_near(4096, 0.45, [(OTHER, 9.9), (DEFAULT, 10.0)])]
    config, reason = CONFIDENT.choose(SPEC, ASKED, iter(near), QUERY, ("M",))  # type: ignore[misc]
    assert config == DEFAULT and "within the" in reason and "standard error" in reason
    # 8% faster at three neighbours that agree: served, a screen pair counting at its own noise.
    near = [_near(4096, 0.45, [(OTHER, 9.2), (DEFAULT, 10.0)]), _near(2048, 0.55, [(OTHER, 4.6), (DEFAULT, 5.0)]),
            _near(8192, 1.0, [(OTHER, 18.4), (DEFAULT, 20.0)], screened=(OTHER,))]
    config, reason = CONFIDENT.choose(SPEC, ASKED, iter(near), QUERY, ("M",))  # type: ignore[misc]
    assert config == OTHER and reason.startswith("paired evidence:") and "3 of 3 neighbour key(s)" in reason
    # The same mean advantage from pairs that disagree (-28% and +12%) is no evidence.
    near = [_near(4096, 0.45, [(OTHER, 7.2), (DEFAULT, 10.0)]), _near(2048, 0.55, [(OTHER, 5.6), (DEFAULT, 5.0)])]
    config, reason = CONFIDENT.choose(SPEC, ASKED, iter(near), QUERY, ("M",))  # type: ignore[misc]
    assert config == DEFAULT and "within the" in reason
    # Nothing timed with the default: the default.
    near = [_near(4096, 0.45, [(OTHER, 5.0), (SLOW, 6.0)])]
    config, reason = CONFIDENT.choose(SPEC, ASKED, iter(near), QUERY, ("M",))  # type: ignore[misc]
    assert config == DEFAULT and "no candidate was timed with it" in reason


def test_the_confident_test_wants_evidence_on_both_sides_of_n() -> None:
    asked = key(3000, 6144)
    default = SPEC.default_config(asked, QUERY)
    fast = {**default, "threads": int(default["threads"]) * 2}
    assert SPEC.check_config(fast, asked, QUERY) is None and _slot(fast) != _slot(default)
    # N = 4096 was tuned (the asked N is inside the range) but never timed the candidate.
    above = [_near(4096, 0.7, [(fast, 8.0), (default, 10.0)], n=8192),
             _near(2048, 1.0, [(fast, 4.0), (default, 5.0)], n=8192),
             _near(4096, 0.7, [(default, 5.0)], n=4096)]
    config, reason = CONFIDENT.choose(SPEC, asked, iter(above), QUERY, ("M",))  # type: ignore[misc]
    assert _slot(config) == _slot(default) and "only above N=6144 (at least 8192)" in reason
    both = [*above[:2], _near(4096, 0.7, [(fast, 4.0), (default, 5.0)], n=4096)]
    config, reason = CONFIDENT.choose(SPEC, asked, iter(both), QUERY, ("M",))  # type: ignore[misc]
    assert _slot(config) == _slot(fast) and reason.startswith("paired evidence:")
    # M transfers: evidence from smaller M alone is evidence.
    below_m = [_near(2048, 0.55, [(OTHER, 4.0), (DEFAULT, 5.0)]), _near(1024, 1.5, [(OTHER, 2.0), (DEFAULT, 2.5)])]
    config, _ = CONFIDENT.choose(SPEC, ASKED, iter(below_m), QUERY, ("M",))  # type: ignore[misc]
    assert config == OTHER


def test_a_neighbour_made_with_other_tunable_defaults_is_weighed_alike() -> None:
    # The registry's neighbours carry their configs' slots made with the family's
    # defaults, and the rule reads those; a neighbour made by hand with no defaults and
    # complete configs goes through time_of instead, and both must decide alike.
    timed = [(OTHER, 9.0), (DEFAULT, 10.0), (SLOW, 12.0)], [(OTHER, 4.6), (DEFAULT, 5.0), (SLOW, 6.0)]
    ours = [_near(4096, 0.45, timed[0]), _near(2048, 0.55, timed[1])]
    assert ours[0].slots == tuple(_slot(c) for c, _ in sorted(timed[0], key=lambda ct: ct[1]))
    assert ours[0].time_at(_slot(OTHER)) == ours[0].time_of(OTHER) == 9.0 and ours[0].final_at(_slot(OTHER))
    theirs = [Neighbour(n.key, n.distance, SPEC.complete_config(dict(n.winner)),
                        tuple((SPEC.complete_config(dict(c)), t) for c, t in n.timings), "", defaults={})
              for n in ours]
    assert SPEC.tunable_defaults and dict(theirs[0].defaults) != SPEC.tunable_defaults  # the other path
    for rule in (PairedEvidence(), PairedEvidence(margin=0.005, confidence=2.0)):
        mine = rule.choose(SPEC, ASKED, iter(ours), QUERY, ("M",))  # type: ignore[misc]
        other = rule.choose(SPEC, ASKED, iter(theirs), QUERY, ("M",))  # type: ignore[misc]
        assert mine == other and mine is not None and mine[0] == OTHER
