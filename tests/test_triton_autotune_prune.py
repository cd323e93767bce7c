"""The drop-in never runs a served config that the kernel author's own
``prune_configs_by`` removes for the call: a one-pass row softmax (one block must cover
the row) tuned at 64 columns is not run with its 64-wide block on rows of 100 or 200.
Run on the CPU with Triton's interpreter."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from triton_interpreter import use_interpreter

use_interpreter()

import torch  # noqa: E402

from factories import artifact_dict  # noqa: E402
from flyconfigs.registry import unregister_kernel  # noqa: E402
from flyconfigs.schema import Artifact, write_atomic  # noqa: E402

H200 = "sm90:132:NVIDIA H200"
SOURCE = '''
import triton
import triton.language as tl

from flyconfigs.kernels.triton_autotune import autotune

CONFIGS = [triton.Config({"BLOCK": 64}, num_warps=1), triton.Config({"BLOCK": 256}, num_warps=2)]
PRUNED = []


def keep_wide_enough(configs, named_args, **kwargs):
    PRUNED.append(named_args["n_cols"])
    return [c for c in configs if c.kwargs["BLOCK"] >= named_args["n_cols"]]


@autotune(family="one_pass_softmax", configs=CONFIGS, key=["n_cols"], fallback=FALLBACK,
          prune_configs_by={"early_config_prune": keep_wide_enough}, do_bench=lambda fn, quantiles: [1.0] * 3)
@triton.jit
def softmax_kernel(Y, X, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(Y + row * stride + cols, e / tl.sum(e, 0), mask=cols < n_cols)
'''


@pytest.fixture(autouse=True)
def _forget() -> Any:
    yield
    unregister_kernel("one_pass_softmax")
    sys.modules.pop("one_pass_softmax_mod", None)


def _load(tmp_path: Path, fallback: str) -> Any:
    (tmp_path / "one_pass_softmax_mod.py").write_text(SOURCE.replace("FALLBACK", repr(fallback)))
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module("one_pass_softmax_mod")
    finally:
        sys.path.remove(str(tmp_path))


def _tuned_at_64(tmp_path: Path, module: Any) -> Path:
    family = module.softmax_kernel.family
    data = artifact_dict(n_candidates=2, key={"n_cols": 64, "dtype": "fp32"}, kernel="one_pass_softmax")
    for cand, config in zip(data["candidates"], family.configs, strict=True):
        cand["config"] = config
    data["winner"] = {"config": family.configs[0], "timing": data["candidates"][0]["timing"]}
    data["default"] = {"config": family.configs[1], "timing": data["candidates"][1]["timing"]}
    data["kernel"]["source_sha256"] = family.source_sha256()
    artifact = Artifact.model_validate(data)
    return write_atomic(tmp_path / "tuned" / artifact.file_name(), artifact.to_json_bytes()).parent


@pytest.mark.parametrize("fallback", ["triton", "default"])
def test_a_served_config_the_authors_prune_removes_is_never_run(tmp_path: Path, fallback: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    module = _load(tmp_path, fallback)
    monkeypatch.setenv("FLYCONFIGS_PATH", str(_tuned_at_64(tmp_path, module)))
    monkeypatch.setenv("FLYCONFIGS_DEVICE", H200)
    from flyconfigs.registry import refresh

    refresh()
    kernel = module.softmax_kernel
    for n_cols in (64, 100, 200):
        x = torch.randn(3, n_cols)
        y = torch.empty_like(x)
        kernel[(3,)](y, x, x.stride(0), n_cols)
        assert kernel.resolution is not None and kernel.resolution.source == "override"
        assert torch.allclose(y.double(), torch.softmax(x.double(), -1), atol=1e-6), n_cols
        assert kernel.best_config.kwargs["BLOCK"] == (64 if n_cols == 64 else 256)
