"""The fused residual-add + RMSNorm family, written in Triton: its key, tunable space,
default heuristic and reference.

``residual += x; y = residual * rsqrt(mean(residual**2) + eps) * w`` over the last
dimension, in place on the residual, as serving engines call it between transformer
layers.  The sum is rounded to the residual's dtype before it is normalized, so the
result is what the unfused pair (a torch add, then RMSNorm of the stored residual)
gives, with fp32 accumulation.  This module is the declaration and imports neither
torch nor Triton; the kernel is ``kernel.py`` and the op users call
is :mod:`flyconfigs.kernels.fused_add_rmsnorm.op`.

Tunables (Triton's ``num_warps`` and ``num_stages`` are launch options, the rest are
``tl.constexpr`` parameters of the kernel):

``block_n``
    columns one step of a program covers (a power of two).  At least the row: the row
    stays in registers between the add and the write.  Shorter: the row is walked in
    chunks twice, the second pass reading the just-written residual back from L2.
``rows_per_program``
    rows one program normalizes as a ``[rows, block_n]`` tile (short rows).
``num_warps``
    warps per program.
``num_stages``
    software-pipelining depth of the chunked passes (1 when the row fits one step).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING

from flyconfigs.errors import InvalidKeyError
from flyconfigs.kernels.fused_add_rmsnorm.reference import reference_fused_add_rms_norm
from flyconfigs.kernels.rownorm import (
    ELEMENT_BYTES,
    HIDDEN_SIZE_GRID,
    KEY_AXES,
    check_row_key,
    complete_row_key,
    pow2_ceil,
    source_sha256,
    source_text,
)
from flyconfigs.registry.declarations import KeyAxis, KeyValue
from flyconfigs.registry.device import DeviceQuery

if TYPE_CHECKING:
    from flyconfigs.gpu import Backend
    from flyconfigs.kernels.fused_add_rmsnorm.workload import FusedAddRMSNormWorkload

__all__ = ["HIDDEN_SIZE_GRID", "SPEC", "TUNABLES", "FusedAddRMSNormSpec", "reference_fused_add_rms_norm", "traffic_bytes"]

BLOCK_N = tuple(1 << p for p in range(5, 16))  # 32 … 32768
ROWS = (1, 2, 4, 8, 16)
WARPS = (1, 2, 4, 8, 16, 32)
STAGES = (1, 2, 3)
MAX_TILE = 16384
"""At most this many elements in one program's tile: beyond it the tile spills."""
MAX_PER_THREAD = 64
SPACE_PER_THREAD = (4, 32)
"""Elements per thread the space searches: fewer leave threads idle on loads, more spill."""
TUNABLES: dict[str, tuple[int, ...]] = {
    "block_n": BLOCK_N,
    "rows_per_program": ROWS,
    "num_warps": WARPS,
    "num_stages": STAGES,
}
SMOKE_GRID = ("M=1,4096 N=1024,4096 dtype=bf16",)


def traffic_bytes(m: int, n: int, dtype: str, weight_dtype: str) -> int:
    """The bytes the fused op must move: x and the residual read, the residual and y
    written (``4·M·N·sizeof(x)``), and the weight once."""
    return 4 * m * n * ELEMENT_BYTES[dtype] + n * ELEMENT_BYTES[weight_dtype]


@dataclass(frozen=True)
class FusedAddRMSNormSpec:
    """The fused add + RMSNorm family (a :class:`~flyconfigs.registry.KernelDecl` and a
    :class:`~flyconfigs.kernels.plugin.TunableKernel`)."""

    name: str = "fused_add_rmsnorm"
    version: int = 1
    source_file: str = "fused_add_rmsnorm/kernel.py"

    @property
    def key_axes(self) -> tuple[KeyAxis, ...]:
        return KEY_AXES

    def source(self) -> str:
        """The Triton source of the kernel."""
        return source_text(self.source_file)

    def source_sha256(self) -> str:
        """sha256 of :meth:`source`, recorded in every artifact."""
        return source_sha256(self.source_file)

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` validated against the axes; the weight is the activation dtype or fp32."""
        norm = check_row_key(self, key)
        if int(norm["N"]) > BLOCK_N[-1] * 64:
            raise InvalidKeyError(f"key axis 'N' of {self.name!r} must be <= {BLOCK_N[-1] * 64}, got {norm['N']}")
        return norm

    def traffic(self, key: Mapping[str, KeyValue]) -> int:
        """Bytes one call must move (see :func:`traffic_bytes`)."""
        return traffic_bytes(int(key["M"]), int(key["N"]), str(key["dtype"]), str(key["weight_dtype"]))

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
        """``None`` when ``config`` names exactly the tunables with values of the space
        and fits ``key``, else why not.  Triton runs on NVIDIA and AMD alike."""
        missing = [name for name in TUNABLES if name not in config]
        extra = sorted(str(name) for name in config if name not in TUNABLES)
        if missing or extra:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else [])
            return f"not a {self.name} config: {'; '.join(parts)}"
        for name, allowed in TUNABLES.items():
            value = config[name]
            if type(value) is not int or value not in allowed:
                return f"{name}={value!r} is not one of {', '.join(map(str, allowed))}"
        return self.valid(config, key)

    def valid(self, config: Mapping[str, object], key: Mapping[str, KeyValue]) -> str | None:
        """``None`` when ``config`` can run for ``key``, else why not."""
        n = int(key["N"])
        block, rows = int(config["block_n"]), int(config["rows_per_program"])  # type: ignore[call-overload]
        warps, stages = int(config["num_warps"]), int(config["num_stages"])  # type: ignore[call-overload]
        tile = rows * block
        if tile > MAX_TILE:
            return f"a tile of {rows}×{block} exceeds {MAX_TILE} elements"
        if block < n and rows > 1:
            return "a chunked row takes one row per program"
        if block > pow2_ceil(n):
            return f"block_n {block} is wider than the row needs ({pow2_ceil(n)})"
        if block >= n and stages != 1:
            return "a row in one step has no loop to pipeline (num_stages must be 1)"
        if -(-n // block) > 64:
            return "more than 64 chunks per row"
        per_thread = tile // (32 * warps)
        if per_thread > MAX_PER_THREAD:
            return f"{per_thread} elements per thread exceed {MAX_PER_THREAD}"
        if per_thread < 1:
            return "more threads than elements in the tile"
        return None

    def space(self, key: Mapping[str, KeyValue], device: DeviceQuery | None = None) -> list[dict[str, KeyValue]]:
        """The configs worth timing: the whole row in one step (with several rows per
        program for rows up to 2048, never more rows than there are), or for rows of
        8192 and more chunks of 2048 or 4096 columns with 1 or 2 stages; 4–32 elements
        per thread.  The default is always among them."""
        norm = self.check_key(key)
        m, n = int(norm["M"]), int(norm["N"])
        whole = pow2_ceil(n)
        shapes: list[tuple[int, int, int]] = []
        for rows in ROWS:
            if rows == 1 or (whole <= 2048 and rows <= pow2_ceil(m)):
                shapes.append((whole, rows, 1))
        if whole >= 8192:
            shapes += [(b, 1, s) for b in (2048, 4096) for s in (1, 2)]
        out: list[dict[str, KeyValue]] = []
        for block, rows, stages in shapes:
            for warps in WARPS:
                config: dict[str, KeyValue] = {"block_n": block, "rows_per_program": rows,
                                               "num_warps": warps, "num_stages": stages}
                per_thread = rows * block // (32 * warps)
                low, high = SPACE_PER_THREAD
                if (per_thread < low and warps > 1) or per_thread > high:
                    continue
                if self.valid(config, norm) is None:
                    out.append(config)
        default = self.default_config(norm, device)
        if default not in out:
            out.insert(0, default)
        return out

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The heuristic: the whole row in one step up to 16384 columns (chunks of 4096
        beyond), about 8 elements per thread (1–16 warps), and for short rows enough
        rows per program to fill a 2048-element tile."""
        m, n = int(key["M"]), int(key["N"])
        block = min(pow2_ceil(n), MAX_TILE)
        if block < n:
            block = 4096
        rows = 1
        if block <= 1024:
            rows = max(1, min(2048 // block, pow2_ceil(m), ROWS[-1]))
        warps = max(1, min(16, rows * block // 256))
        return {"block_n": block, "rows_per_program": rows, "num_warps": warps, "num_stages": 1}

    # -- tuning ---------------------------------------------------------------------

    @property
    def tunables(self) -> dict[str, tuple[int | str, ...]]:
        """Each tunable and the values it takes (``flyconfigs schema --kernel`` publishes them)."""
        return dict(TUNABLES)

    @property
    def presets(self) -> dict[str, tuple[str, ...]]:
        """``hidden``: the hidden-size grid; ``smoke``: four keys."""
        return {"hidden": HIDDEN_SIZE_GRID, "smoke": SMOKE_GRID}

    def complete_key(self, key: Mapping[str, KeyValue]) -> dict[str, KeyValue]:
        """``key`` with ``weight_dtype`` defaulting to ``dtype`` (see :func:`complete_row_key`)."""
        return complete_row_key(key)

    def build(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue], device: DeviceQuery) -> None:
        """Nothing ahead: Triton compiles each variant on its first launch (in the
        measuring process, where a failure is recorded as that candidate's compile error)."""
        return None

    def workload(self, key: Mapping[str, KeyValue], copies: int, backend: Backend) -> FusedAddRMSNormWorkload:
        """Rotated inputs for ``key`` (imports torch and Triton)."""
        from flyconfigs.kernels.fused_add_rmsnorm.workload import FusedAddRMSNormWorkload

        return FusedAddRMSNormWorkload(key, copies, self)

    def tool_versions(self) -> dict[str, str]:
        """Triton's version, which decides the code every config compiles to."""
        try:
            return {"triton": metadata.version("triton")}
        except metadata.PackageNotFoundError:
            return {}


SPEC = FusedAddRMSNormSpec()
