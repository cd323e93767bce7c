"""The op's input checks, on CPU torch: each bad input is a clear TypeError or
ValueError raised before anything is launched (there is no GPU here to launch on)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from flyconfigs.kernels import rms_norm  # noqa: E402


def test_bad_inputs() -> None:
    x = torch.randn(4, 64)
    w = torch.rand(64)
    with pytest.raises(ValueError, match="runs on a GPU; x is on cpu"):
        rms_norm(x, w)
    with pytest.raises(TypeError, match="torch tensors"):
        rms_norm([[1.0] * 64], w)
    with pytest.raises(TypeError, match="not torch.int32"):
        rms_norm(x.to(torch.int32), w)
    with pytest.raises(TypeError, match="weight must be torch.bfloat16 or float32"):
        rms_norm(x.to(torch.bfloat16), w.to(torch.float16))
    with pytest.raises(ValueError, match="last dimension of x must be contiguous"):
        rms_norm(x.t(), torch.rand(4))
    with pytest.raises(ValueError, match=r"weight must have shape \(64,\)"):
        rms_norm(x, torch.rand(32))
    with pytest.raises(ValueError, match="non-empty"):
        rms_norm(torch.empty(0, 64), w)
    with pytest.raises(ValueError, match="out must match x"):
        rms_norm(x, w, out=torch.empty(4, 32))


def test_the_declaration_needs_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, flyconfigs.kernels.rmsnorm as r; print(r.SPEC.name, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert done.stdout.split() == ["rmsnorm", "False"], done.stderr
