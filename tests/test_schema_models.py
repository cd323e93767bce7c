"""The artifact models: strict types, finite numbers, safe names, cross-field rules,
canonical JSON and the content hash."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from factories import H200, MI300X, artifact_dict, staged_artifact_dict
from flyconfigs.errors import ArtifactError
from flyconfigs.schema import Artifact, Device, canonical_bytes, content_hash, load_artifact, loads_artifact


def _load(data: dict[str, Any]) -> Artifact:
    return loads_artifact(json.dumps(data).encode())


def _problem(data: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ArtifactError) as info:
        _load(data)
    return info.value.problems[0].field, info.value.problems[0].message


def _with(path: str, value: Any) -> dict[str, Any]:
    data = artifact_dict()
    node: Any = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = parts[-1]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    "path,value",
    [
        ("kernel.version", "1"),
        ("kernel.version", True),
        ("kernel.version", 1.0),
        ("kernel.version", 0),
        ("kernel.source_sha256", "xyz"),
        ("device.vendor", "qualcomm"),
        ("device.wave_size", 16),
        ("device.compute_units", 0),
        ("device.l2_bytes", -1),
        ("device.memory_bandwidth_gbps", "fast"),
        ("device.features", ["xnack-", "sramecc+"]),
        ("device.product", ""),
        ("key.M", [[[1]]]),
        ("key.M", "x" * 1025),
        ("key.M", 2**63),
        ("key.bad axis", 1),
        ("candidates.0.timing.samples", 0),
        ("candidates.0.timing.median_us", -1.0),
        ("candidates.0.timing.bandwidth_gbps", -5.0),
        ("candidates.0.resources.occupancy", 1.5),
        ("candidates.0.resources.registers", "32"),
        ("candidates.0.status", "wrong_result"),
        ("candidates.7.message", None),
        ("selection.rule", "fastest"),
        ("selection.noise_band", -0.1),
        ("provenance.created", "yesterday"),
        ("provenance.backend", "CUDA!"),
        ("schema_version", "1"),
        ("candidates", []),
        ("kernel", _DELETE),
        ("device", _DELETE),
        ("key", {}),
        ("provenance", _DELETE),
    ],
)
def test_each_field_rule_rejects(path: str, value: Any) -> None:
    field, message = _problem(_with(path, value))
    top = path.split(".")[0]
    assert field.startswith(top), (field, message)


def test_status_ok_candidate_may_be_untimed_but_failures_may_not_be_timed() -> None:
    data = artifact_dict()
    data["candidates"][1].pop("timing")
    assert _load(data).candidates[1].timing is None
    data = artifact_dict()
    data["candidates"][7]["timing"] = data["candidates"][0]["timing"]
    assert _problem(data)[0] == "candidates[7].timing"


def test_default_must_be_a_candidate() -> None:
    data = artifact_dict()
    data["default"] = {"config": {"threads": 3}}
    assert _problem(data) == ("default.config", "must be one of the candidates")


def test_models_are_frozen() -> None:
    artifact = _load(artifact_dict())
    with pytest.raises(ValidationError):
        artifact.schema_version = "1.1"  # type: ignore[misc]


def test_round_trip_model_json_model_is_identity() -> None:
    for device in (H200, MI300X):
        artifact = _load(artifact_dict(device=device, n_candidates=64))
        assert loads_artifact(artifact.to_json_bytes()) == artifact
        assert loads_artifact(artifact.to_json_bytes()).to_json_bytes() == artifact.to_json_bytes()


def test_canonical_bytes_sort_keys_and_are_compact() -> None:
    assert canonical_bytes({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'.encode()
    with pytest.raises(ValueError):
        canonical_bytes({"x": float("nan")})


def test_content_hash_is_stable_and_independent_of_key_order() -> None:
    data = artifact_dict()
    shuffled = json.loads(json.dumps(data))
    shuffled["device"] = dict(reversed(list(shuffled["device"].items())))
    a, b = _load(data), _load(shuffled)
    assert a.content_hash() == b.content_hash()
    assert a.content_hash() == content_hash(json.loads(a.to_json_bytes()))


def test_canonical_form_and_content_hash_are_pinned() -> None:
    # Literal values: a change of either means the canonical form changed for every reader.
    doc = {"b": [1, 2.5, "x"], "a": {"z": None, "\u00e9": True}}
    assert canonical_bytes(doc) == b'{"a":{"z":null,"\xc3\xa9":true},"b":[1,2.5,"x"]}'
    assert content_hash(doc) == "462e36fe2242ede9ad9792dbc1fdc8ee2e28b6d3ff10ae1a8f7fc38c893602bc"
    corpus = Path(__file__).parent / "corpus" / "good" / "h200-rmsnorm.json"
    assert load_artifact(corpus).content_hash() == "1909fd89c3daddc12e47b4a0802cf2a7a32ef17e03c8d10e38cd08d25d95f193"


def test_file_name_is_safe_and_depends_on_identity_only() -> None:
    a = _load(artifact_dict())
    b = _load(artifact_dict(winner_index=2))
    c = _load(artifact_dict(key={"M": 1, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}))
    assert a.file_name() == b.file_name() != c.file_name()
    assert a.file_name().startswith("rmsnorm-sm90-") and a.file_name().endswith(".json")


def test_device_identity_is_explicit() -> None:
    device = Device.model_validate(MI300X)
    assert set(Device.IDENTITY_FIELDS) == set(device.identity.model_dump())
    other = Device.model_validate({**MI300X, "driver_version": "6.2", "l2_bytes": 1})
    assert other.identity == device.identity


def test_pretty_printed_and_reordered_files_still_load() -> None:
    data = artifact_dict()
    raw = json.dumps(data, indent=4).encode()
    assert loads_artifact(raw) == _load(copy.deepcopy(data))


# -- which protocol timed each candidate (1.2), and whether it was held (1.3) -----------


def test_a_staged_artifact_reads_and_round_trips() -> None:
    artifact = _load(staged_artifact_dict())
    assert [c.timed_in for c in artifact.candidates] == ["final", "final", "final", "screen", "screen", "screen",
                                                         "screen", None]
    assert artifact.provenance.timing_protocol.screen.samples == 5
    assert artifact.provenance.timing_protocol.held is True
    assert loads_artifact(artifact.to_json_bytes()).to_json_bytes() == artifact.to_json_bytes()


def test_an_artifact_that_does_not_say_writes_no_timed_in() -> None:
    written = json.loads(_load(artifact_dict()).to_json_bytes())
    assert all("timed_in" not in c for c in written["candidates"])
    assert "screen" not in written["provenance"]["timing_protocol"]
    assert "held" not in written["provenance"]["timing_protocol"]


def test_held_is_a_json_bool() -> None:
    for value in ("yes", 1, 0):
        data = staged_artifact_dict()
        data["provenance"]["timing_protocol"]["held"] = value
        assert _problem(data)[0] == "provenance.timing_protocol.held", value
    data = staged_artifact_dict()
    data["provenance"]["timing_protocol"]["held"] = False
    assert _load(data).provenance.timing_protocol.held is False


def test_a_screen_timing_needs_the_screen_protocol() -> None:
    data = staged_artifact_dict()
    del data["provenance"]["timing_protocol"]["screen"]
    assert _problem(data) == ("candidates[3].timed_in", "'screen' needs provenance.timing_protocol.screen")


def test_a_timing_has_the_sample_count_of_the_protocol_it_names() -> None:
    data = staged_artifact_dict()
    data["candidates"][4]["timed_in"] = "final"
    assert _problem(data) == ("candidates[4].timed_in", "5 samples, but the final protocol takes 50")
    data = staged_artifact_dict()
    data["candidates"][2]["timed_in"] = "screen"
    assert _problem(data) == ("candidates[2].timed_in", "50 samples, but the screen protocol takes 5")


def test_the_winner_and_the_default_are_timed_in_the_final() -> None:
    for chosen in (0, 1):  # the winner, the default
        data = staged_artifact_dict()
        data["candidates"][chosen]["timed_in"] = "screen"
        data["candidates"][chosen]["timing"]["samples"] = 5
        assert _problem(data) == (f"candidates[{chosen}].timed_in",
                                  "the winner and the default are timed in the final, not the screen")


def test_only_a_timed_candidate_says_where_it_was_timed() -> None:
    data = staged_artifact_dict()
    data["candidates"][7]["timed_in"] = "screen"  # a compile error
    assert _problem(data) == ("candidates[7].timed_in", "only a candidate with a timing says where it was timed")


def test_timed_in_takes_only_screen_or_final() -> None:
    data = staged_artifact_dict()
    data["candidates"][3]["timed_in"] = "warmup"
    assert _problem(data)[0] == "candidates[3].timed_in"


# -- where an imported artifact came from (1.4) ------------------------------------------


def _imported() -> dict[str, Any]:
    config = {"BLOCK": 64}
    data = artifact_dict()
    data.update(candidates=[{"config": config, "status": "ok"}], winner={"config": config}, default=None,
                selection={"rule": "imported"})
    data["provenance"] = {"tool": "an importer", "backend": "upstream", "source": {
        "project": "example/upstream", "file": "configs/tuned.csv", "entry": "line 2",
        "device_from": "line 2: its gfx and cu_num columns", "reported": {"us": 7.3189, "note": "from the file"}}}
    return data


def test_an_imported_artifact_names_its_source_and_carries_no_timing() -> None:
    artifact = _load(_imported())
    assert artifact.winner.timing is None and artifact.candidates[0].timing is None
    source = artifact.provenance.source
    assert source is not None and source.reported == {"us": 7.3189, "note": "from the file"}
    assert loads_artifact(artifact.to_json_bytes()) == artifact
    assert "source" not in json.loads(_load(artifact_dict()).to_json_bytes())["provenance"]


def test_only_an_imported_selection_names_a_source() -> None:
    data = artifact_dict()
    data["provenance"]["source"] = _imported()["provenance"]["source"]
    assert _problem(data) == ("provenance.source", "only an imported selection names an upstream source")


@pytest.mark.parametrize("field", ["project", "file", "device_from"])
def test_a_source_states_its_project_file_and_how_the_device_was_derived(field: str) -> None:
    data = _imported()
    del data["provenance"]["source"][field]
    assert _problem(data)[0] == f"provenance.source.{field}"


def test_reported_figures_are_scalars_never_a_timing() -> None:
    data = _imported()
    data["provenance"]["source"]["reported"] = {"us": {"median_us": 7.3}}
    assert _problem(data)[0].startswith("provenance.source.reported.us")


# -- the kernel families a package serves (1.5) -----------------------------------------


def test_a_manifest_names_exactly_the_families_its_rows_serve() -> None:
    from flyconfigs.publish.layout import build_manifest
    from flyconfigs.schema.load import parse_manifest

    artifacts = [Artifact.model_validate(artifact_dict()), Artifact.model_validate(artifact_dict(kernel="acme_rms"))]
    manifest, _ = build_manifest("sm90", artifacts)
    assert manifest.kernels == ["acme_rms", "rmsnorm"] and manifest.families() == ["acme_rms", "rmsnorm"]
    data = manifest.model_dump(mode="json")
    for wrong in (["rmsnorm"], ["rmsnorm", "acme_rms"], ["acme_rms", "other", "rmsnorm"]):
        with pytest.raises(ArtifactError, match="kernels.*must be the rows' kernels, sorted"):
            parse_manifest({**data, "kernels": wrong}, "manifest.json")
    older = {k: v for k, v in data.items() if k != "kernels"} | {"schema_version": "1.4"}
    assert parse_manifest(older, "manifest.json").families() == ["acme_rms", "rmsnorm"]
