"""A family's ``relaxed_axes`` (exact axes the nearest-key step may differ on, ranked by
its own ``key_distance``) and ``tie_rank`` (the order of equally near keys, here read from
their artifacts), as the resolver's nearest-key step uses them; either failing is the
plugin's fault, reported once, and never breaks serving."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from factories import H200, make_artifact
from flyconfigs.registry import KernelDecl, KeyAxis, Resolver
from flyconfigs.registry.search.ties import Tie
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import write_atomic

H200_SPEC = "sm90:132:NVIDIA H200"
DEFAULT = {"threads": 1, "rows_per_block": 1, "vector_bytes": 0, "row_storage": "reg", "occupancy": 0}
_KEPT: list[KernelDecl] = []
"""Families whose faults a test counts: faults are remembered by the declaration's id, so
none of them may be freed and its id reused by a later test's family."""


class _Family(KernelDecl):
    """Keyed by an ordinal ``M`` and an exact ``act``: a key of another ``act`` serves
    after the asked ``M`` and before another ``M`` (as aiter's fused MoE retries)."""

    name = "toy_relaxed"
    version = 1
    key_axes = (KeyAxis("M", int, ordinal=True, minimum=1), KeyAxis("act", str))
    relaxed_axes: Any = ("act",)

    def default_config(self, key: Mapping[str, Any], device: DeviceQuery | None) -> dict[str, Any]:
        return dict(DEFAULT)

    def key_distance(self, asked: Mapping[str, Any], tuned: Mapping[str, Any]) -> tuple[float, ...] | None:
        return (abs(asked["M"] - tuned["M"]), float(asked["act"] != tuned["act"]))


class _SmemLast(_Family):
    """Of equally near keys, a winner that keeps its row in shared memory last."""

    def tie_rank(self, asked: Mapping[str, Any], tie: Tie) -> tuple[float, ...]:
        assert tie.artifact is not None
        return (*tie.distance[1:], float(tie.artifact.winner.config["row_storage"] == "smem"))


def _folder(tmp_path: Path, *keys: tuple[int, str]) -> tuple[Path, dict[tuple[int, str], dict[str, Any]]]:
    folder = tmp_path / "tuned"
    winners = {}
    for i, (m, act) in enumerate(keys):
        artifact = make_artifact(device=H200, key={"M": m, "act": act}, kernel="toy_relaxed", winner_index=i + 1)
        write_atomic(folder / artifact.file_name(), artifact.to_json_bytes())
        winners[(m, act)] = dict(artifact.winner.config)
    return folder, winners


def test_a_relaxed_axis_serves_another_value_after_the_asked_one_and_says_so(tmp_path: Path) -> None:
    folder, winners = _folder(tmp_path, (64, "silu"), (128, "gelu"))
    resolver = Resolver([str(folder)], detector=None)
    own = resolver.resolve(_Family(), {"M": 128, "act": "gelu"}, H200_SPEC)
    assert own.key_match == "exact" and dict(own.config) == winners[(128, "gelu")]
    relaxed = resolver.resolve(_Family(), {"M": 64, "act": "gelu"}, H200_SPEC)
    assert relaxed.key_match == "nearest" and dict(relaxed.config) == winners[(64, "silu")]
    assert dict(relaxed.matched_key or {}) == {"M": 64, "act": "silu"}
    assert any("no tuned key has the asked act" in r and "act=silu (asked gelu)" in r for r in relaxed.reasons)
    _, steps = resolver.explain(_Family(), {"M": 64, "act": "gelu"}, H200_SPEC)
    assert any("act=silu (asked gelu)" in s.outcome for s in steps)


def test_without_its_own_distance_a_family_is_offered_no_relaxed_key(tmp_path: Path) -> None:
    class _LogDistance(KernelDecl):
        name, version = "toy_relaxed", 1
        key_axes = _Family.key_axes
        relaxed_axes = ("act",)

        def default_config(self, key: Mapping[str, Any], device: DeviceQuery | None) -> dict[str, Any]:
            return dict(DEFAULT)

    folder, _ = _folder(tmp_path, (64, "silu"))
    r = Resolver([str(folder)], detector=None).resolve(_LogDistance(), {"M": 64, "act": "gelu"}, H200_SPEC)
    assert r.source == "default"


@pytest.mark.parametrize("answer", ["act", ("M",), ("nope",), 3])
def test_relaxed_axes_naming_anything_but_exact_axes_are_reported_once_and_relax_nothing(
        tmp_path: Path, answer: object) -> None:
    folder, winners = _folder(tmp_path, (64, "silu"), (96, "gelu"))
    family = _Family()
    family.relaxed_axes = answer
    _KEPT.append(family)
    resolver = Resolver([str(folder)], detector=None)
    for m in (64, 70):
        r = resolver.resolve(family, {"M": m, "act": "gelu"}, H200_SPEC)
        # Relaxed, silu's 64 would serve both (M first); as it is, only gelu's 96 can.
        assert dict(r.config) == winners[(96, "gelu")]
    faults = [p for p in resolver.problems.problems() if p.kind == "kernel-error" and "relaxed_axes" in p.message]
    assert len(faults) == 1 and "non-ordinal axes" in faults[0].message


def test_tie_rank_orders_equally_near_keys(tmp_path: Path) -> None:
    folder, winners = _folder(tmp_path, (64, "silu"), (64, "swiglu"))
    by_storage = {w["row_storage"]: w for w in winners.values()}
    assert set(by_storage) == {"smem", "reread"}
    asked = {"M": 64, "act": "gelu"}
    r = Resolver([str(folder)], detector=None).resolve(_SmemLast(), asked, H200_SPEC)
    assert dict(r.config) == by_storage["reread"]

    class _SmemFirst(_Family):
        def tie_rank(self, asked: Mapping[str, Any], tie: Tie) -> tuple[float, ...]:
            assert tie.artifact is not None
            return (*tie.distance[1:], -float(tie.artifact.winner.config["row_storage"] == "smem"))

    first = Resolver([str(folder)], detector=None).resolve(_SmemFirst(), asked, H200_SPEC)
    assert dict(first.config) == by_storage["smem"]


def test_a_raising_tie_rank_is_reported_once_and_keeps_the_sources_order(tmp_path: Path) -> None:
    class _Raising(_Family):
        def tie_rank(self, asked: Mapping[str, Any], tie: Tie) -> tuple[float, ...]:
            raise RuntimeError("a bug in the plugin")

    folder, winners = _folder(tmp_path, (64, "silu"), (64, "swiglu"))
    resolver = Resolver([str(folder)], detector=None)
    plain = Resolver([str(folder)], detector=None).resolve(_Family(), {"M": 64, "act": "gelu"}, H200_SPEC)
    family = _Raising()
    _KEPT.append(family)
    for m in (64, 65, 66):  # each M ties silu with swiglu
        r = resolver.resolve(family, {"M": m, "act": "gelu"}, H200_SPEC)
        assert dict(r.config) == dict(plain.config) and r.key_match == "nearest"
    faults = [p for p in resolver.problems.problems() if p.kind == "kernel-error" and "tie_rank" in p.message]
    assert len(faults) == 1 and "RuntimeError" in faults[0].message


def test_tie_rank_orders_keys_equally_near_by_the_first_element_in_place_of_the_rest(tmp_path: Path) -> None:
    # 64 and 66 are both 1 from 65: key_distance's rest (the retry) puts gelu's 64 first.
    folder, winners = _folder(tmp_path, (64, "gelu"), (66, "silu"))
    asked = {"M": 65, "act": "gelu"}
    plain = Resolver([str(folder)], detector=None).resolve(_Family(), asked, H200_SPEC)
    assert dict(plain.config) == winners[(64, "gelu")]

    class _Larger(_Family):
        def tie_rank(self, asked: Mapping[str, Any], tie: Tie) -> tuple[float, ...]:
            return (-float(tie.key["M"]),)

    class _Equal(_Family):
        def tie_rank(self, asked: Mapping[str, Any], tie: Tie) -> tuple[float, ...]:
            return (0.0,)

    larger = Resolver([str(folder)], detector=None).resolve(_Larger(), asked, H200_SPEC)
    assert dict(larger.config) == winners[(66, "silu")]
    equal = Resolver([str(folder)], detector=None).resolve(_Equal(), asked, H200_SPEC)
    assert dict(equal.config) == winners[(64, "gelu")]  # equal ranks keep the default order


def test_a_tie_never_serves_a_copy_of_a_key_that_precedence_shadows(tmp_path: Path) -> None:
    """One key in two folders of ``FLYCONFIGS_PATH``: the first folder's copy serves that
    key exactly, so a tie at that key must serve it too, however the family ranks the
    second folder's copy (a tie orders keys, never the copies of one key)."""

    class _SmemFirst(_Family):
        def tie_rank(self, asked: Mapping[str, Any], tie: Tie) -> tuple[float, ...]:
            assert tie.artifact is not None
            return (*tie.distance[1:], -float(tie.artifact.winner.config["row_storage"] == "smem"))

    folders = []
    for name, winner in (("first", 2), ("second", 1)):  # the second folder's copy keeps its row in smem
        artifact = make_artifact(device=H200, key={"M": 64, "act": "silu"}, kernel="toy_relaxed", winner_index=winner)
        write_atomic(tmp_path / name / artifact.file_name(), artifact.to_json_bytes())
        folders.append((str(tmp_path / name), dict(artifact.winner.config)))
    assert folders[0][1]["row_storage"] != "smem" and folders[1][1]["row_storage"] == "smem"
    resolver = Resolver([folder for folder, _ in folders], detector=None)
    exact = resolver.resolve(_SmemFirst(), {"M": 64, "act": "silu"}, H200_SPEC)
    assert exact.key_match == "exact" and dict(exact.config) == folders[0][1]
    relaxed = resolver.resolve(_SmemFirst(), {"M": 64, "act": "gelu"}, H200_SPEC)
    assert relaxed.key_match == "nearest" and dict(relaxed.config) == folders[0][1], relaxed.file


def test_a_relaxed_key_equal_in_python_but_not_as_json_is_a_nearer_key(tmp_path: Path) -> None:
    """A relaxed list axis tuned ``[1.0]`` for an asked ``[1]``: equal as Python values, two
    keys as JSON, so it is a nearer key's winner, which the family may pass over."""

    class _Shaped(KernelDecl):
        name, version = "toy_shaped", 1
        key_axes = (KeyAxis("M", int, ordinal=True, minimum=1), KeyAxis("shape", list))
        relaxed_axes = ("shape",)

        def default_config(self, key: Mapping[str, Any], device: DeviceQuery | None) -> dict[str, Any]:
            return dict(DEFAULT)

        def key_distance(self, asked: Mapping[str, Any], tuned: Mapping[str, Any]) -> tuple[float, ...] | None:
            return (abs(asked["M"] - tuned["M"]),)

        def pass_over_neighbour(self, asked: Mapping[str, Any], tuned: Mapping[str, Any], config: Mapping[str, Any],
                                device: DeviceQuery) -> str | None:
            return "tuned for another shape"

    artifact = make_artifact(device=H200, key={"M": 64, "shape": [1.0]}, kernel="toy_shaped", winner_index=1)
    write_atomic(tmp_path / artifact.file_name(), artifact.to_json_bytes())
    family = _Shaped()
    r = Resolver([str(tmp_path)], detector=None).resolve(family, {"M": 64, "shape": [1]}, H200_SPEC)
    assert r.source == "default", (r.key_match, r.matched_key)
    assert any("tuned for another shape" in reason for reason in r.reasons)
