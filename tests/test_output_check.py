"""The tuner's check of a candidate's output: float32 bounds that decide exactly as the
float64 tolerance rule does.  Runs on CPU tensors; the GPU runs the same torch code."""

from __future__ import annotations

import math

import pytest
import torch

from flyconfigs.kernels.output_check import TOLERANCES, OutputCheck
from flyconfigs.kernels.rmsnorm import reference_rms_norm

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def float64_rule(y: torch.Tensor, reference: torch.Tensor, dtype: str) -> torch.Tensor:
    rtol, atol = TOLERANCES[dtype]
    bound = atol + rtol * reference.abs()
    y64 = y.double()
    return (reference - bound <= y64) & (y64 <= reference + bound)


def outputs_around(reference: torch.Tensor, dtype: str, seed: int) -> torch.Tensor:
    """Outputs of ``dtype`` spread over twice the tolerance each side of the reference, so
    many sit on or next to a bound."""
    rtol, atol = TOLERANCES[dtype]
    bound = atol + rtol * reference.abs()
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(reference.shape, generator=g, dtype=torch.float64) * 4 - 2
    return (reference + u * bound).to(DTYPES[dtype])


@pytest.mark.parametrize("dtype", sorted(TOLERANCES))
def test_the_float32_bounds_accept_exactly_what_the_float64_rule_accepts(dtype: str) -> None:
    g = torch.Generator().manual_seed(1)
    reference = torch.randn(64, 512, generator=g, dtype=torch.float64) * 3
    check = OutputCheck.of(reference, dtype)
    for seed in range(5):
        y = outputs_around(reference, dtype, seed)
        accepted = (check.low <= y) & (y <= check.high)
        expected = float64_rule(y, reference, dtype)
        assert 0 < int(expected.sum()) < expected.numel()  # both sides of the bounds are tried
        assert torch.equal(accepted, expected)
        assert (check.mismatch(y) is None) == bool(expected.all())


def test_float32_outputs_one_step_past_a_bound_are_refused_and_those_on_it_accepted() -> None:
    reference = torch.tensor([[1.0, -2.5, 1e-3, 0.0, 7.25]], dtype=torch.float64)
    check = OutputCheck.of(reference, "fp32")
    inf = torch.full_like(check.low, math.inf)
    for y in (check.low, check.high):
        assert check.mismatch(y) is None
    for y in (torch.nextafter(check.low, -inf), torch.nextafter(check.high, inf)):
        assert float64_rule(y, reference, "fp32").logical_not().all()
        assert check.mismatch(y) == f"{reference.numel()} outputs off the float64 reference " \
            f"(the farthest {torch.maximum(check.low - y, y - check.high).max().item():.3g} beyond its tolerance)"


def test_made_in_chunks_the_bounds_are_those_of_the_whole_reference() -> None:
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(37, 300, generator=g) * 2).to(torch.bfloat16)
    w = (torch.rand(300, generator=g) + 0.5).to(torch.bfloat16)
    calls: list[tuple[int, int]] = []

    def rows(a: int, b: int) -> torch.Tensor:
        calls.append((a, b))
        return reference_rms_norm(x[a:b], w, 1e-6)

    chunked = OutputCheck((37, 300), rows, "bf16", chunk_elements=1000)
    whole = OutputCheck.of(reference_rms_norm(x, w, 1e-6), "bf16")
    assert calls == [(a, min(37, a + 3)) for a in range(0, 37, 3)]  # 1000 elements is 3 rows of 300
    assert torch.equal(chunked.low, whole.low) and torch.equal(chunked.high, whole.high)


def test_a_mismatch_says_what_is_wrong() -> None:
    reference = torch.randn(8, 64, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    check = OutputCheck.of(reference, "bf16")
    good = reference.to(torch.bfloat16)
    assert check.mismatch(good) is None
    unwritten = good.clone()
    unwritten[2, :5] = float("nan")
    assert check.mismatch(unwritten) == "5 outputs unwritten or NaN"
    wrong = good.clone()
    wrong[1, 1] += 1
    wrong[4, 7] -= 2
    message = check.mismatch(wrong)
    assert message is not None and message.startswith("2 outputs off the float64 reference")


def test_an_output_dtype_without_a_tolerance_is_refused() -> None:
    with pytest.raises(ValueError, match="no tolerance for output dtype 'fp8'"):
        OutputCheck.of(torch.zeros(2, 2, dtype=torch.float64), "fp8")
