"""The Triton helpers on a real GPU: the example family's workload checks its space
against the reference and reads the compiled variants' resources, its op serves the
registry's config, and a kernel under the ``triton.autotune`` drop-in runs an artifact's
config for this device with no search and searches with Triton's own autotune without one."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("triton")

import triton_softmax_package as package  # noqa: E402
from flyconfigs.registry import default_resolver, register_kernel, unregister_kernel  # noqa: E402

EXAMPLE = Path(__file__).parents[2] / "examples" / "acme-silu-mul"
sys.path.insert(0, str(EXAMPLE))

from acme_silu_mul import SPEC  # noqa: E402


def test_the_example_workload_checks_its_space_on_the_gpu() -> None:
    key = {"M": 257, "N": 5000, "dtype": "bf16"}
    work = SPEC.workload(key, 2, None)
    space = SPEC.space(key)
    for config in space:
        assert work.check(config) is None, config
        resources = work.resources(config)
        assert resources is not None and resources.registers > 0
    work.launcher(space[0])(1)
    torch.cuda.synchronize()


def test_the_example_op_matches_its_reference() -> None:
    from acme_silu_mul.kernel import reference, silu_mul

    register_kernel(SPEC)  # here a folder on sys.path, not an installed distribution
    try:
        gate, up = (torch.randn(64, 3000, device="cuda", dtype=torch.float16) for _ in range(2))
        torch.testing.assert_close(silu_mul(gate, up).double(), reference(gate, up), rtol=2e-3, atol=2e-3)
    finally:
        unregister_kernel(SPEC.name)


def test_the_drop_in_serves_an_artifact_for_this_gpu_and_searches_without_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flyconfigs.gpu import get_backend

    site = tmp_path / "site"
    site.mkdir()
    package.install(site)
    monkeypatch.syspath_prepend(str(site))
    module: Any = package.load(site)
    try:
        kernel = module.softmax_kernel
        device = get_backend().device().model_dump(mode="json")
        key = {"n_rows": 64, "n_cols": 4096, "dtype": "fp32"}
        configs = kernel.family.configs
        tuned_artifact = package.artifact(configs, configs[2], key, device, kernel.family.source_sha256())
        tuned = tmp_path / "tuned"
        tuned.mkdir()
        (tuned / tuned_artifact.file_name()).write_bytes(tuned_artifact.to_json_bytes())
        monkeypatch.setenv("FLYCONFIGS_PATH", str(tuned))
        default_resolver().refresh()

        x = torch.randn(64, 4096, device="cuda")
        torch.testing.assert_close(module.softmax(x), torch.softmax(x, -1))
        assert kernel.resolution.source == "override" and kernel.searches == 0
        assert kernel.best_config is module.CONFIGS[2]

        x = torch.randn(64, 4096, device="cuda", dtype=torch.float16)  # no artifact for fp16
        torch.testing.assert_close(module.softmax(x), torch.softmax(x, -1), rtol=2e-3, atol=2e-3)
        assert kernel.resolution.source == "default" and kernel.searches == 1
    finally:
        unregister_kernel(package.FAMILY)
