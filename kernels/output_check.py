"""Whether a kernel's output matches its float64 reference within its dtype's tolerance.

The rule is ``|y - reference| <= atol + rtol * |reference|`` in float64.  An
:class:`OutputCheck` holds it as two float32 bounds per element, rounded inwards, so that
checking one output reads the output and the bounds once, in one pass and with one
synchronisation, instead of widening the output and the reference to float64 several
times over.  Imports torch; the tuner's worker process uses it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = ["TOLERANCES", "OutputCheck"]

TOLERANCES: dict[str, tuple[float, float]] = {"bf16": (1.6e-2, 1e-2), "fp16": (2e-3, 2e-3), "fp32": (2e-5, 2e-5)}
"""``(rtol, atol)`` of an output dtype."""

CHUNK_ELEMENTS = 1 << 24
"""How many elements of the float64 reference exist at once while the bounds are made."""


def _inward(low64: torch.Tensor, high64: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The smallest float32 >= ``low64`` and the largest float32 <= ``high64``."""
    low, high = low64.float(), high64.float()
    up = torch.full_like(low, math.inf)
    low = torch.where(low.double() < low64, torch.nextafter(low, up), low)
    high = torch.where(high.double() > high64, torch.nextafter(high, -up), high)
    return low, high


class OutputCheck:
    """The float64 tolerance rule for one output, held as float32 bounds.

    For every value a float32 holds exactly (each bf16, fp16 and fp32 output),
    ``low <= y <= high`` holds exactly when ``reference - bound <= y <= reference + bound``
    does in float64, ``bound = atol + rtol * |reference|``.  NaN passes neither.

    ``reference_rows(start, stop)`` returns the float64 reference of rows ``start:stop`` of
    an output of ``shape``; it is called in chunks of about :data:`CHUNK_ELEMENTS` elements,
    so the float64 reference never exists whole.
    """

    def __init__(self, shape: tuple[int, ...], reference_rows: Callable[[int, int], torch.Tensor], dtype: str,
                 chunk_elements: int = CHUNK_ELEMENTS) -> None:
        if dtype not in TOLERANCES:
            raise ValueError(f"no tolerance for output dtype {dtype!r} (one of {', '.join(TOLERANCES)})")
        rtol, atol = TOLERANCES[dtype]
        rows = shape[0]
        step = max(1, chunk_elements // max(1, math.prod(shape[1:])))
        low = high = None
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            part = reference_rows(start, stop)
            if low is None or high is None:
                low = torch.empty(shape, dtype=torch.float32, device=part.device)
                high = torch.empty_like(low)
            bound = atol + rtol * part.abs()
            low[start:stop], high[start:stop] = _inward(part - bound, part + bound)
        if low is None or high is None:
            raise ValueError(f"an output of shape {shape} has no rows to check")
        self.low, self.high = low, high

    @classmethod
    def of(cls, reference: torch.Tensor, dtype: str) -> OutputCheck:
        """The check against a whole float64 ``reference`` tensor."""
        return cls(tuple(reference.shape), lambda a, b: reference[a:b], dtype)

    def mismatch(self, y: torch.Tensor) -> str | None:
        """``None`` when every element of ``y`` is within tolerance, else what is wrong."""
        ok = torch.logical_and(y >= self.low, y <= self.high)
        if bool(ok.all()):
            return None
        nan = int(torch.isnan(y).sum())
        if nan:
            return f"{nan} outputs unwritten or NaN"
        beyond = torch.maximum(self.low - y, y - self.high).max().item()
        return (f"{int((~ok).sum())} outputs off the float64 reference "
                f"(the farthest {beyond:.3g} beyond its tolerance)")
