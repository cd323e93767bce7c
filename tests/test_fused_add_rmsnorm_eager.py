"""The fused op's eager path for a Triton config on the CPU: the compiled kernel prepared
once per layout and launched through Triton's own launcher (arguments in the kernel's
order, the compile-time ones included, the grid from the rows), the per-call checks that
keep it to the addresses it was specialized on and the GPU it was loaded on, and the
fallback to the JIT's launch (run here by Triton's interpreter) where they fail."""

from __future__ import annotations

from typing import Any

import pytest

from triton_interpreter import use_interpreter

use_interpreter()

import torch  # noqa: E402

from flyconfigs.kernels.fused_add_rmsnorm import SPEC, reference_fused_add_rms_norm  # noqa: E402
from flyconfigs.kernels.fused_add_rmsnorm import op as fused_op  # noqa: E402
from flyconfigs.kernels.fused_add_rmsnorm.workload import TritonPrepared, prepare_triton  # noqa: E402

CONFIG = {"impl": "triton", "block_n": 4096, "rows_per_program": 1, "num_warps": 16, "num_stages": 1,
          "row_tiles": 2, "eviction": "stream", "weight_load": "early"}


class FakeCompiled:
    """What the JIT returns on a GPU, as far as the prepared launch uses it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.function = 0xF00
        self.packed_metadata = ("packed",)

    def run(self, *args: Any) -> None:
        self.calls.append(args)

    def launch_metadata(self, grid: Any, stream: int, *args: Any) -> Any:
        return {"grid": grid}


def test_the_prepared_launch_passes_the_kernels_arguments_in_order() -> None:
    compiled = FakeCompiled()
    prepared = prepare_triton(compiled, CONFIG, 4352, (4096, 8192, 16, 12288), device=0)
    assert prepared is not None
    prepared((4096, 8192, 16, 12288, 96, 4352, 4352, 4352, 1e-6), 77)
    (call,) = compiled.calls
    grid, stream, function, packed, meta = call[:3], call[3], call[4], call[5], call[6]
    assert grid == (96, 1, 1) and stream == 77 and function == 0xF00 and packed == ("packed",)
    assert meta == {"grid": (96, 1, 1)}, "the launch metadata made as the JIT makes it"
    # Every argument of the kernel's signature, the compile-time ones included, after the hooks.
    assert call[9:] == (4096, 8192, 16, 12288, 96, 4352, 4352, 4352, 1e-6, 4352, 4096, 1, 1, 256, 1, 1)


def test_the_prepared_launch_fits_only_the_alignment_it_was_specialized_on() -> None:
    prepared = prepare_triton(FakeCompiled(), CONFIG, 4352, (4096, 8194, 16, 12288), device=0)
    assert prepared is not None
    assert prepared.fits(32, 2, 48, 64), "a pointer that was not aligned may be anything"
    assert not prepared.fits(40, 2, 48, 64), "one that was must stay 16-byte aligned"
    assert not prepared.fits(32, 2, 50, 64) and not prepared.fits(32, 2, 48, 66)


def test_nothing_is_prepared_without_a_compiled_kernel() -> None:
    assert prepare_triton(None, CONFIG, 4352, (0, 0, 0, 0), device=0) is None, "the interpreter compiles nothing"
    assert prepare_triton(object(), CONFIG, 4352, (0, 0, 0, 0), device=0) is None


def _remember(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, prepared: TritonPrepared) -> None:
    """The layout of ``(x, r, w, None)`` remembered as a first checked call on a GPU would."""
    m, n = x.shape
    key = {"M": m, "N": n, "dtype": "fp32", "weight_dtype": "fp32"}
    plan = fused_op._Plan(SPEC.default_config(key, None), None, 0, 1, fused_op._RESOLVER.generation)
    layout = fused_op._Layout(plan, 0, m, x.stride(0), r.stride(0), n, prepared)
    fused_op._LAYOUTS[fused_op._layout_key(x, r, w, None)] = layout


def test_a_remembered_layout_launches_its_prepared_kernel_and_falls_back_where_it_must(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fused_op, "current_stream", lambda index: 5)
    device = {"current": 0}
    monkeypatch.setattr(torch.cuda, "current_device", lambda: device["current"])
    m, n = 3, 4352
    x, r, w = torch.randn(m, n) * 0.1, torch.randn(m, n), torch.rand(n) + 0.5
    compiled = FakeCompiled()
    pointers = (x.data_ptr(), r.data_ptr(), w.data_ptr(), 64)
    assert all(p % 16 == 0 for p in pointers)
    prepared = prepare_triton(compiled, CONFIG, n, pointers, device=0)
    assert prepared is not None
    _remember(x, r, w, prepared)
    try:
        fused_op.fused_add_rms_norm(x, r, w, 1e-6)
        (call,) = compiled.calls
        assert call[3] == 5 and call[9:11] == (x.data_ptr(), r.data_ptr()), "launched directly, on x and r"
        # Another GPU is current: the JIT's launch (Triton's interpreter here) runs instead.
        device["current"] = 1
        before = r.clone()
        y = fused_op.fused_add_rms_norm(x, r, w, 1e-6)
        assert len(compiled.calls) == 1
        want_r, want_y = reference_fused_add_rms_norm(x, before, w, 1e-6)
        assert torch.equal(r, want_r) and ((y.double() - want_y).abs().max() / want_y.abs().max()) < 1e-5
        # The same layout 4 bytes off the 16-byte alignment the kernel was specialized on:
        # the JIT's launch too, and a correct result.
        device["current"] = 0
        shifted = (torch.randn(m * n + 4) * 0.1)[1:1 + m * n].view(m, n)
        assert (shifted.shape, shifted.stride()) == (x.shape, x.stride()) and shifted.data_ptr() % 16
        before = r.clone()
        y = fused_op.fused_add_rms_norm(shifted, r, w, 1e-6)
        assert len(compiled.calls) == 1
        want_r, want_y = reference_fused_add_rms_norm(shifted, before, w, 1e-6)
        assert torch.equal(r, want_r) and ((y.double() - want_y).abs().max() / want_y.abs().max()) < 1e-5
        # A bad eps leaves the hot path for the checks (which refuse these CPU tensors first).
        with pytest.raises(ValueError, match="runs on a GPU"):
            fused_op.fused_add_rms_norm(x, r, w, -1.0)
        assert len(compiled.calls) == 1
    finally:
        fused_op._LAYOUTS.clear()
