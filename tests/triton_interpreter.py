"""Triton's interpreter for the CPU tests of the Triton helpers.

Triton decides at import whether its own library functions (``tl.max``, ``tl.sum``, …)
are interpreted, so ``TRITON_INTERPRET=1`` must be set before the first ``import
triton`` of the process, and stays on for the rest of it (``conftest.py`` sets it for a
machine without a GPU before anything is collected).  A test module calls
:func:`use_interpreter` before importing Triton; it skips the module where that cannot
hold: without Triton or torch, where Triton was already imported compiled, and on a
machine with a GPU, where the rest of the process must compile for it (the GPU tests
cover the helpers there)."""

from __future__ import annotations

import os
import sys

import pytest


def use_interpreter() -> None:
    """Turn Triton's interpreter on for this process, or skip the calling module."""
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: Triton must compile for it in this process", allow_module_level=True)
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton was imported without its interpreter in this process", allow_module_level=True)
    os.environ["TRITON_INTERPRET"] = "1"
    pytest.importorskip("triton")
