"""``flyconfigs schema --kernel NAME``: a JSON Schema that checks one kernel's artifacts
completely without flyconfigs' code — every committed H200 artifact passes its kernel's
schema, and each kind of kernel-level mistake the generic schema lets through fails it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from flyconfigs.cli import main
from flyconfigs.registry.declarations import check_tunables
from flyconfigs.schema.pack import folder_artifacts

ROOT = Path(__file__).resolve().parents[1]


def _schema(kernel: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["schema", "--kernel", kernel]) == 0
    schema: dict[str, Any] = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _committed(kernel: str) -> list[dict[str, Any]]:
    """The committed sm90 artifacts of ``kernel`` (read back whole from their packs): an
    even sample of about 50."""
    found = folder_artifacts(ROOT / "artifacts" / "sm90", kernel)
    assert len(found) >= 50
    step = max(1, len(found) // 50)
    return [a.model_dump(mode="json") for a in found[::step]]


@pytest.mark.parametrize("kernel", ["rmsnorm", "fused_add_rmsnorm"])
def test_every_committed_artifact_passes_its_kernels_schema(kernel: str, capsys: pytest.CaptureFixture[str]) -> None:
    validator = jsonschema.Draft202012Validator(_schema(kernel, capsys))
    for artifact in _committed(kernel):
        errors = list(validator.iter_errors(artifact))
        assert not errors, errors[0].message


def _mistakes(artifact: dict[str, Any], other_kernel: str) -> dict[str, dict[str, Any]]:
    def changed(edit: Any) -> dict[str, Any]:
        data = copy.deepcopy(artifact)
        edit(data)
        return data

    return {
        "another kernel's name": changed(lambda d: d["kernel"].update(name=other_kernel)),
        "a key axis missing": changed(lambda d: d["key"].pop("weight_dtype")),
        "an undeclared key axis": changed(lambda d: d["key"].update(batch=2)),
        "a string for an int axis": changed(lambda d: d["key"].update(M="4096")),
        "a dtype the kernel does not take": changed(lambda d: d["key"].update(dtype="int8")),
        "an unknown tunable in the winner": changed(lambda d: d["winner"]["config"].update(unroll=2)),
        "a tunable value outside the space": changed(lambda d: d["candidates"][0]["config"].update(num_warps=3)),
        "a bool for an int tunable": changed(lambda d: d["default"]["config"].update(num_warps=True)),
    }


def test_kernel_level_mistakes_pass_the_generic_schema_and_fail_the_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    narrow = jsonschema.Draft202012Validator(_schema("fused_add_rmsnorm", capsys))
    assert main(["schema", "artifact"]) == 0
    generic = jsonschema.Draft202012Validator(json.loads(capsys.readouterr().out))
    artifact = _committed("fused_add_rmsnorm")[0]
    assert narrow.is_valid(artifact) and generic.is_valid(artifact)
    for what, data in _mistakes(artifact, "rmsnorm").items():
        assert generic.is_valid(data), f"{what}: the generic schema should not know the kernel"
        assert not narrow.is_valid(data), f"{what}: the kernel's schema let it through"


def test_each_implementation_of_fused_add_rmsnorm_has_its_own_config_form(capsys: pytest.CaptureFixture[str]) -> None:
    from flyconfigs.kernels.fused_add_rmsnorm import SPEC
    from flyconfigs.registry import DeviceQuery

    validator = jsonschema.Draft202012Validator(_schema("fused_add_rmsnorm", capsys))
    artifact = _committed("fused_add_rmsnorm")[0]
    key = artifact["key"]
    space = SPEC.space(key, DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ()))
    source = next(c for c in space if c["impl"] == "source")
    triton = next(c for c in space if c["impl"] == "triton")

    def with_winner(config: dict[str, Any]) -> dict[str, Any]:
        data = copy.deepcopy(artifact)
        data["winner"]["config"] = config
        return data

    assert validator.is_valid(with_winner(source)) and validator.is_valid(with_winner(triton))
    refused = {
        "a source config with a Triton tunable": {**source, "num_warps": 4},
        "a source config missing a tunable": {k: v for k, v in source.items() if k != "threads"},
        "a source config without its impl (which then means triton)": {k: v for k, v in source.items() if k != "impl"},
        "a Triton config with a source tunable": {**triton, "threads": 64},
        "an impl the family does not have": {**triton, "impl": "rust"},
    }
    for what, config in refused.items():
        assert not validator.is_valid(with_winner(config)), what
        assert check_tunables(SPEC, config) is not None, f"{what}: the registry refuses what the schema refuses"


def test_schema_kernel_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--kernel", "layernorm"]) == 2
    assert "unknown kernel 'layernorm'" in capsys.readouterr().err
    assert main(["schema", "manifest", "--kernel", "rmsnorm"]) == 2
    assert "takes no manifest" in capsys.readouterr().err
