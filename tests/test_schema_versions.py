"""Versioning: same major any minor, newer minors' fields ignored and reported, older
formats migrated through registered steps, newer majors refused."""

from __future__ import annotations

import json

import pytest

from factories import artifact_dict
from flyconfigs.errors import ArtifactError, UnsupportedSchemaVersionError
from flyconfigs.schema import SCHEMA_VERSION, migrations, parse_artifact, upgrade
from flyconfigs.schema.versions import Migration, register_migration


def test_newer_minor_loads_and_reports_unknown_fields() -> None:
    data = artifact_dict()
    data["schema_version"] = "1.9"
    data["energy_joules"] = 3.5
    data["device"]["hbm_stacks"] = 8
    data["candidates"][2]["power"] = {"watts": 700}
    artifact, report = parse_artifact(data, "new.json")
    assert artifact.schema_version == "1.9"
    assert report.ignored_fields == ("device.hbm_stacks", "candidates[2].power", "energy_joules")


def test_same_minor_rejects_unknown_fields() -> None:
    data = artifact_dict()
    data["energy_joules"] = 3.5
    with pytest.raises(ArtifactError, match="energy_joules"):
        parse_artifact(data)


def test_newer_major_is_refused_naming_the_supported_version() -> None:
    data = artifact_dict()
    data["schema_version"] = "3.1"
    with pytest.raises(UnsupportedSchemaVersionError, match=r"'3.1'.*up to " + SCHEMA_VERSION):
        parse_artifact(data, "future.json")


def test_flydsl_is_a_registered_migration_into_the_current_major() -> None:
    steps = {m.source: m.target for m in migrations()}
    assert steps["flydsl-1"] == SCHEMA_VERSION
    payload = {
        "version": 1,
        "identity": {"name": "rmsnorm", "key": {"M": 8, "N": 4096}, "device": {"name": "MI300X", "arch": "gfx942", "compute_units": 304}},
        "config": {"BLOCK_THREADS": 256},
    }
    artifact, report = parse_artifact(payload, "f.json")
    assert report.migrated_from == ("flydsl-1",)
    assert artifact.winner.config == {"BLOCK_THREADS": 256}
    assert artifact.device.vendor == "amd" and artifact.device.wave_size == 64
    assert artifact.selection.rule == "imported"


def test_flydsl_version_must_be_the_int_one() -> None:
    payload = {"version": True, "identity": {}, "config": {}}
    with pytest.raises(ArtifactError, match="schema_version"):
        parse_artifact(payload)


def test_migration_chain_and_registry_rules() -> None:
    calls = []

    def from_zero(data: dict, file: str) -> dict:
        calls.append(file)
        new = artifact_dict()
        new["key"] = data["old_key"]
        return new

    register_migration(Migration("0.x", SCHEMA_VERSION, from_zero))
    try:
        out, path = upgrade({"schema_version": "0.3", "old_key": {"M": 2, "N": 8, "dtype": "bf16", "weight_dtype": "bf16"}}, "old.json")
        assert path == ("0.x",) and calls == ["old.json"] and out["key"]["M"] == 2
        with pytest.raises(ValueError, match="already registered"):
            register_migration(Migration("0.x", SCHEMA_VERSION, from_zero))
    finally:
        from flyconfigs.schema import versions

        versions._REGISTRY.pop("0.x")


def test_unknown_format_is_a_clear_error() -> None:
    with pytest.raises(ArtifactError, match="no migration from format '0.x'"):
        upgrade({"schema_version": "0.9"}, "old.json")
    with pytest.raises(ArtifactError, match="not a flyconfigs artifact"):
        upgrade(json.loads('{"hello": 1}'))
