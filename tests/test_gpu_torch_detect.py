"""The GPU detected through torch where the vendor bindings are absent (``pip install
'flyconfigs[triton]'`` brings torch and Triton, not cuda-bindings or hip-python), and
one clear reason when nothing can detect it.

This machine has no GPU: torch's answers for a GPU (``is_available``, the device
properties) are stood in for by monkeypatching torch.cuda, and the bindings' failure by
a detector that raises what the GPU layer raises without them; torch's answer without a
GPU is this machine's real one."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

import flyconfigs.gpu as gpu
from flyconfigs.errors import GPURuntimeMissingError
from flyconfigs.gpu.cache import default_cache_dir
from flyconfigs.gpu.torch_device import identity_from_properties
from flyconfigs.registry import Resolver

torch = pytest.importorskip("torch")
MISSING = GPURuntimeMissingError("the cuda backend needs cuda-python: pip install 'flyconfigs[cuda]'", extras=("cuda",))


def _no_bindings(ordinal: int = 0) -> object:
    raise MISSING


def test_a_cuda_gpu_is_described_from_torchs_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "detect_device", _no_bindings)
    monkeypatch.delenv("FLYCONFIGS_NO_GPU_DETECT", raising=False)
    props = SimpleNamespace(major=9, minor=0, multi_processor_count=132, name="NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: props.name)
    identity = gpu.current_identity()
    assert (identity.vendor, identity.arch, identity.product, identity.compute_units, identity.features) == (
        "nvidia", "sm90", "NVIDIA H100 80GB HBM3", 132, [])
    resolver = Resolver(paths=[], detector=gpu.current_identity)
    assert resolver.current_device()[0] is not None and resolver.current_device()[0].arch == "sm90"


def test_a_rocm_gpu_gives_its_arch_and_features_from_gcn_arch_name() -> None:
    props = SimpleNamespace(gcnArchName="gfx942:xnack-:sramecc+", multi_processor_count=304)
    identity = identity_from_properties(props, "AMD Instinct MI300X", hip=True)
    assert (identity.vendor, identity.arch, identity.compute_units, identity.features) == (
        "amd", "gfx942", 304, ["sramecc+", "xnack-"])


def test_without_a_gpu_torch_can_see_the_reason_names_both(monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(gpu, "detect_device", _no_bindings)
    monkeypatch.delenv("FLYCONFIGS_NO_GPU_DETECT", raising=False)
    with pytest.raises(GPURuntimeMissingError) as caught:
        gpu.current_identity()
    assert "flyconfigs[cuda]" in str(caught.value) and "sees no GPU" in str(caught.value)
    assert caught.value.extras == ("cuda",)
    resolver = Resolver(paths=[], detector=gpu.current_identity)
    with caplog.at_level(logging.WARNING, logger="flyconfigs.registry"):
        for m in (1, 2):
            assert resolver.resolve("rmsnorm", {"M": m, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}).source \
                == "default"
    warned = [r.getMessage() for r in caplog.records if r.name == "flyconfigs.registry"]
    assert len(warned) == 1 and "pip install 'flyconfigs[cuda]'" in warned[0], warned


def test_the_cache_folder_needs_no_platformdirs(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.delenv("FLYCONFIGS_CACHE_DIR", raising=False)
    monkeypatch.setitem(__import__("sys").modules, "platformdirs", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert str(default_cache_dir()) == f"{tmp_path}/flyconfigs/kernels"
