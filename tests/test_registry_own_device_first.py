"""A family's ``own_device_first``: the asked device's nearest tuned key serves before an
exact key tuned on a sibling of the same arch and compute units (vLLM reads only the
running GPU's own file); without it, the sibling's exact key comes first.  Real vLLM
0.34.0 files: an H100 as the driver names some boards (``NVIDIA_H100``) and an H200, both
sm90 with 132 SMs, tuned for one key on different batch sizes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from flyconfigs.cli import main
from flyconfigs.kernels.vllm_fused_moe import VLLMFusedMoESpec
from flyconfigs.registry import Resolver, register_kernel, unregister_kernel
from tests.vllm_corpus import CONFIGS

BARE = CONFIGS / "E=128,N=1024,device_name=NVIDIA_H100,dtype=fp8_w8a8.json"
H200 = CONFIGS / "E=128,N=1024,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
KEY = {"E": 128, "N": 1024, "dtype": "fp8_w8a8", "block_n": None, "block_k": None, "down": False}


@pytest.fixture
def imported(tmp_path: Path) -> Path:
    assert main(["import", "vllm", str(BARE), str(H200), "--out", str(tmp_path)]) == 0
    return tmp_path


class _SiblingsFirst(VLLMFusedMoESpec):
    own_device_first = False


class _Raising(VLLMFusedMoESpec):
    @property
    def own_device_first(self) -> bool:  # type: ignore[override]
        raise RuntimeError("no")


@pytest.fixture
def declared() -> Iterator[None]:
    yield
    unregister_kernel("vllm_fused_moe")


def test_the_devices_own_nearest_key_serves_before_a_siblings_exact_key(imported: Path) -> None:
    bare, h200 = json.loads(BARE.read_text()), json.loads(H200.read_text())
    assert "24" not in bare and "24" in h200  # the sibling tuned 24; this device 16 and 32
    served = Resolver(paths=[str(imported)], detector=None).resolve("vllm_fused_moe", {**KEY, "M": 24},
                                                                     device="NVIDIA_H100")
    assert (served.layer, served.key_match, served.matched_key["M"]) == ("exact", "nearest", 16)  # type: ignore[index]
    assert dict(served.config) == bare["16"]


@pytest.mark.parametrize("decl", [_SiblingsFirst(), _Raising()])
def test_without_it_or_when_it_raises_a_siblings_exact_key_comes_first(imported: Path, declared: None,
                                                                        decl: VLLMFusedMoESpec) -> None:
    register_kernel(decl)
    resolver = Resolver(paths=[str(imported)], detector=None)
    served = resolver.resolve("vllm_fused_moe", {**KEY, "M": 24}, device="NVIDIA_H100")
    assert (served.layer, served.key_match) == ("same-compute-units", "exact")
    assert dict(served.config) == json.loads(H200.read_text())["24"]
    if isinstance(decl, _Raising):
        assert "own_device_first raised RuntimeError: no; an exact key on a sibling device serves first" in [
            p.message for p in resolver.problems.problems()]
