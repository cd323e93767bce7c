"""docs/schema-test-vectors.json is what the code makes: every input gives exactly the
canonical text, sha256, file name and content hash the vectors state, so a writer in
another language that reproduces the vectors reproduces flyconfigs' identities."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from flyconfigs.schema import Artifact
from flyconfigs.schema.canonical import canonical_bytes, canonical_text
from flyconfigs.schema.flydsl import flydsl_file_name, flydsl_identity_digest
from flyconfigs.schema.models import DeviceIdentity, artifact_file_name

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[1] / "docs" / "schema-test-vectors.json").read_text(encoding="utf-8"))


def _ids(group: str) -> list[str]:
    return [v.get("name") or v.get("file_name") for v in VECTORS[group]]


@pytest.mark.parametrize("vector", VECTORS["canonical"], ids=_ids("canonical"))
def test_canonical_text_and_hash(vector: dict[str, str]) -> None:
    value = json.loads(vector["input"])
    assert canonical_text(value) == vector["canonical"]
    assert hashlib.sha256(canonical_bytes(value)).hexdigest() == vector["sha256"]
    # The canonical text is a fixed point: read back and written again, it is unchanged.
    assert canonical_text(json.loads(vector["canonical"])) == vector["canonical"]


@pytest.mark.parametrize("vector", VECTORS["refused"], ids=_ids("refused"))
def test_values_json_cannot_hold_exactly_are_refused(vector: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        canonical_bytes(json.loads(vector["input"]))


@pytest.mark.parametrize("vector", VECTORS["file_names"], ids=_ids("file_names"))
def test_artifact_file_names(vector: dict[str, Any]) -> None:
    identity = {"kernel": vector["kernel"], "device": vector["device"], "key": vector["key"]}
    assert canonical_text(identity) == vector["identity_canonical"]
    name = artifact_file_name(vector["kernel"], DeviceIdentity(**vector["device"]), vector["key"])
    assert name == vector["file_name"]
    digest = hashlib.sha256(vector["identity_canonical"].encode("utf-8")).hexdigest()[:16]
    assert name == f"{vector['kernel'].lstrip('.')}-{vector['device']['arch']}-{digest}.json"


@pytest.mark.parametrize("vector", VECTORS["artifacts"], ids=_ids("artifacts"))
def test_whole_artifacts(vector: dict[str, Any]) -> None:
    artifact = Artifact.model_validate_json(json.dumps(vector["artifact"]))
    written = artifact.to_json_bytes()
    assert written == canonical_bytes(vector["artifact"]) + b"\n"
    assert artifact.content_hash() == vector["content_hash"] == hashlib.sha256(written[:-1]).hexdigest()
    assert hashlib.sha256(written).hexdigest() == vector["file_sha256"]
    assert artifact.file_name() == vector["file_name"]


@pytest.mark.parametrize("vector", VECTORS["flydsl_file_names"], ids=_ids("flydsl_file_names"))
def test_flydsl_file_names(vector: dict[str, Any]) -> None:
    assert flydsl_identity_digest(vector["identity"]) == vector["digest"]
    assert flydsl_file_name(vector["identity"]) == vector["file_name"]
