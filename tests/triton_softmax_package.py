"""A third party's row softmax kernel under the ``triton.autotune`` drop-in, as a
distribution's source (its module text and entry point), for the tests of
:mod:`flyconfigs.kernels.triton_autotune`.  Runs on a CPU with Triton's interpreter."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from distributions import install_kernel_package
from factories import artifact_dict
from flyconfigs.schema import Artifact

MODULE = "acme_rowsoftmax"
FAMILY = "acme_row_softmax"
SOURCE = '''
"""acme_rowsoftmax: a row softmax autotuned with flyconfigs' drop-in for triton.autotune."""
import os
import statistics
import time

import torch
import triton
import triton.language as tl

from flyconfigs.kernels.triton_autotune import autotune

CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2),
           triton.Config({"BLOCK": 128}, num_warps=4)]
BENCHED = []


def host_bench(fn, quantiles):
    """Triton's interpreter has no device timer: there Triton's own search times on the host."""
    BENCHED.append(fn)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return [statistics.median(times)] * len(quantiles)


def inputs(key, device):
    x = torch.randn(key["n_rows"], key["n_cols"], device=device).to({"fp32": torch.float32, "fp16": torch.float16}[key["dtype"]])
    return {"Y": torch.empty_like(x), "X": x, "stride": x.stride(0), "n_rows": key["n_rows"], "n_cols": key["n_cols"]}


def reference(args):
    return {"Y": torch.softmax(args["X"].double(), dim=-1)}


@autotune(family="acme_row_softmax", configs=CONFIGS, key=["n_rows", "n_cols"],
          fallback=os.environ.get("ACME_FALLBACK", "triton"), default=CONFIGS[1],
          do_bench=host_bench if os.environ.get("TRITON_INTERPRET") == "1" else None,
          grid=lambda meta: (meta["n_rows"],), inputs=inputs, reference=reference)
@triton.jit
def softmax_kernel(Y, X, stride, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = X + row * stride
    top = tl.full([BLOCK], -float("inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        top = tl.maximum(top, tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32))
    peak = tl.max(top, 0)
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.exp(tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32) - peak)
    norm = tl.sum(total, 0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        tl.store(Y + row * stride + cols, (tl.exp(x - peak) / norm).to(Y.dtype.element_ty), mask=cols < n_cols)


def softmax(x):
    y = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](y, x, x.stride(0), x.shape[0], x.shape[1])
    return y
'''


def install(root: Path) -> None:
    """Install the distribution ``acme-rowsoftmax`` into ``root`` (a folder on ``sys.path``)."""
    install_kernel_package(root, "acme-rowsoftmax", "0.1.0", {f"{MODULE}.py": SOURCE},
                           {FAMILY: f"{MODULE}:softmax_kernel.family"})


def load(root: Path, fallback: str = "triton") -> object:
    """Import the module fresh from ``root`` with ``fallback`` (each test gets its own)."""
    import importlib
    import os

    os.environ["ACME_FALLBACK"] = fallback
    sys.modules.pop(MODULE, None)
    return importlib.import_module(MODULE)


def artifact(configs: list[dict[str, Any]], winner: dict[str, Any], key: dict[str, Any],
             device: dict[str, Any] | None = None, source_sha256: str | None = None) -> Artifact:
    """A measured artifact of the family at ``key`` (on ``device``, an H200 by default)
    whose candidates are ``configs``, ``winner`` the fastest and ``configs[1]`` the default,
    tuned with the source of digest ``source_sha256`` (default: the factories' own)."""
    data = artifact_dict(n_candidates=len(configs), key=dict(key), kernel=FAMILY, device=device)
    if source_sha256 is not None:
        data["kernel"]["source_sha256"] = source_sha256
    for cand, config in zip(data["candidates"], configs, strict=True):
        cand["config"] = config
    data["candidates"][-1] = {**data["candidates"][0], "config": configs[-1]}
    index = configs.index(winner)
    data["winner"] = {"config": winner, "timing": data["candidates"][index]["timing"]}
    data["default"]["config"] = configs[1]
    return Artifact.model_validate(data)
