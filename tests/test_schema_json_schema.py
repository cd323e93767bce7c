"""The JSON Schema documents: committed, current, shipped, and usable with jsonschema alone."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from factories import MI300X, artifact_dict, staged_artifact_dict
from flyconfigs.cli import main
from flyconfigs.errors import ArtifactError
from flyconfigs.publish.layout import build_manifest
from flyconfigs.schema import SCHEMA_VERSION, Artifact, parse_artifact
from flyconfigs.schema.json_schema import KINDS, SINCE, json_schema_file_name, json_schema_versions, load_json_schema, render

SCHEMA_DIR = Path(__file__).parents[1] / "schema" / "json_schema"
CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_committed_documents_match_the_models(kind: str) -> None:
    committed = (SCHEMA_DIR / json_schema_file_name(kind)).read_text()
    assert committed == render(kind), f"regenerate schema/json_schema/{json_schema_file_name(kind)} from the models"


def test_every_version_is_kept_and_shipped() -> None:
    assert SCHEMA_VERSION in json_schema_versions()
    for version in json_schema_versions():
        for kind in KINDS:
            if tuple(map(int, version.split("."))) < tuple(map(int, SINCE[kind].split("."))):
                with pytest.raises(KeyError):
                    load_json_schema(kind, version)
                continue
            jsonschema.Draft202012Validator.check_schema(load_json_schema(kind, version))


def _validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((SCHEMA_DIR / json_schema_file_name(kind)).read_text()))


@pytest.mark.parametrize("path", sorted((CORPUS / "good").iterdir()), ids=lambda p: p.name)
def test_good_examples_validate(path: Path) -> None:
    assert list(_validator("artifact").iter_errors(json.loads(path.read_text()))) == []


@pytest.mark.parametrize(
    "name",
    [
        "string-for-int.json",
        "bool-for-int.json",
        "wrong-type-object.json",
        "unsafe-kernel-name.json",
        "unsafe-arch.json",
        "key-value-too-deep.json",
        "missing-winner.json",
        "unknown-status.json",
        "unknown-field.json",
        "version-not-string.json",
        "not-an-object.json",
    ],
)
def test_bad_examples_fail_the_json_schema_too(name: str) -> None:
    document = json.loads((CORPUS / "bad" / name).read_text())
    assert list(_validator("artifact").iter_errors(document)), name


def test_the_json_schema_takes_timed_in_only_on_timed_candidates() -> None:
    staged = staged_artifact_dict()
    assert list(_validator("artifact").iter_errors(staged)) == []
    staged["candidates"][7]["timed_in"] = "screen"  # a compile error: never timed
    assert list(_validator("artifact").iter_errors(staged))


def test_manifest_json_schema_accepts_a_real_manifest() -> None:
    artifacts = [Artifact.model_validate(artifact_dict(device=MI300X, key={"M": m, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"})) for m in (1, 64)]
    manifest, _ = build_manifest("gfx942", artifacts)
    assert list(_validator("manifest").iter_errors(manifest.model_dump(mode="json"))) == []
    broken = manifest.model_dump(mode="json")
    broken["artifacts"][0]["file"] = "../escape.json"
    assert list(_validator("manifest").iter_errors(broken))


def test_cli_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "manifest"]) == 0
    assert json.loads(capsys.readouterr().out)["$id"] == f"urn:flyconfigs:schema:manifest:{SCHEMA_VERSION}"
    assert main(["schema", "artifact", "--version", "0.1"]) == 2


def _mutated(change) -> dict:
    document = artifact_dict()
    change(document)
    return document


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(schema_version="2.0"),
        lambda d: d["candidates"][-1].update(timing=d["candidates"][0]["timing"]),
        lambda d: d["candidates"][-1].pop("message"),
        lambda d: d["device"].update(features=["xnack-", "xnack-"]),
        lambda d: d["key"].update({"batch size": 2}),
        lambda d: d["candidates"][0]["config"].update({"9lives": 1}),
    ],
    ids=["newer-major", "timing-on-a-failed-candidate", "failed-candidate-without-message", "duplicate-features",
         "key-name-outside-the-rule", "tunable-name-outside-the-rule"],
)
def test_the_json_schema_refuses_what_the_reader_refuses_where_json_schema_can_say_it(change) -> None:
    document = _mutated(change)
    with pytest.raises(ArtifactError):
        parse_artifact(document)
    assert list(_validator("artifact").iter_errors(document))


def test_the_json_schema_names_the_rules_only_the_reader_enforces() -> None:
    for kind in KINDS:
        assert "JSON Schema cannot express" in load_json_schema(kind)["$comment"]
    manifest = load_json_schema("manifest")
    assert manifest["properties"]["schema_version"]["pattern"] == r"^1\.[0-9]{1,4}$"
