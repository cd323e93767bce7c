"""What every importer shares (flyconfigs.adapters.imported): an upstream config becomes an
artifact only if the loader would serve it, judged by the one rule the resolver and
``validate`` apply, and a refusal names the file and the entry's field."""

from __future__ import annotations

import pytest

from flyconfigs.adapters.imported import UpstreamFile, imported_artifact
from flyconfigs.errors import ArtifactError
from flyconfigs.kernels.vllm_fused_moe import SPEC
from flyconfigs.registry.checks.check import refusal
from flyconfigs.registry.core.products import find_product
from flyconfigs.schema import Artifact

UPSTREAM = UpstreamFile("vllm-project/vllm", "vllm/model_executor/layers/fused_moe/configs/x.json")
KEY = {"E": 128, "N": 384, "dtype": None, "block_n": None, "block_k": None, "down": False, "M": 64}
CONFIG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
          "num_stages": 2}


def _import(key: dict[str, object], config: dict[str, object]) -> Artifact:
    product = find_product("H200")
    assert product is not None
    return imported_artifact(SPEC, product.device, key, config, upstream=UPSTREAM, entry='"64"', device_from="given",
                             tool="test", backend="vllm", file="x.json", field="64")


def test_a_config_the_loader_serves_becomes_an_artifact_the_loader_serves() -> None:
    artifact = _import(KEY, CONFIG)
    assert refusal(SPEC, artifact, dict(artifact.key), None) is None


@pytest.mark.parametrize("key, config, said", [
    (KEY, {**CONFIG, "num_warps": 3}, "vllm_fused_moe cannot serve it: num_warps=3 is not a power of two"),
    ({**KEY, "M": 0}, CONFIG, "M"),
    ({k: v for k, v in KEY.items() if k != "E"}, CONFIG, "E"),
])
def test_a_key_or_config_the_loader_would_refuse_is_refused_naming_the_file_and_entry(
        key: dict[str, object], config: dict[str, object], said: str) -> None:
    with pytest.raises(ArtifactError) as info:
        _import(key, config)
    (problem,) = info.value.problems
    assert info.value.file == "x.json" and problem.field == "64" and said in problem.message


def test_a_value_the_schema_refuses_is_one_problem_of_the_entry() -> None:
    with pytest.raises(ArtifactError) as info:
        _import(KEY, {**CONFIG, "BLOCK_SIZE_M": 2**100})  # a power of two, beyond any 64-bit int
    (problem,) = info.value.problems
    assert info.value.file == "x.json" and problem.field == "64"
    assert problem.message.startswith("config.BLOCK_SIZE_M: ") and "64-bit signed range" in problem.message
