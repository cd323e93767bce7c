"""The fused residual-add + RMSNorm family, in two implementations: its key, tunable
space, default heuristic and reference.

``residual += x; y = residual * rsqrt(mean(residual**2) + eps) * w`` over the last
dimension, in place on the residual, as serving engines call it between transformer
layers.  The sum is rounded to the residual's dtype before it is normalized, so the
result is what the unfused pair (a torch add, then RMSNorm of the stored residual)
gives, with fp32 accumulation.  This module is the declaration and imports neither
torch nor Triton; the kernel is ``kernel.py`` and the op users call
is :mod:`flyconfigs.kernels.fused_add_rmsnorm.op`.

``impl`` names the implementation a config runs, and each holds its own tunables (the
family's :attr:`~FusedAddRMSNormSpec.tunable_variants`):

``triton`` (the default, and what a config that leaves ``impl`` out means)
    the Triton kernel of ``kernel.py``, with the tunables below.
``source``
    RMSNorm's single CUDA/HIP source compiled with ``FC_RESIDUAL`` (NVRTC on NVIDIA,
    hipRTC on AMD), with exactly RMSNorm's tunables and validity rules
    (:mod:`flyconfigs.kernels.rmsnorm.validity`): a row's threads add the residual into
    the row they hold, store the rounded sum, and normalize it as RMSNorm normalizes x.

The Triton implementation's tunables (``num_warps`` and ``num_stages`` are launch
options, the rest ``tl.constexpr`` parameters of the kernel):

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

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING

from flyconfigs.kernels.fused_add_rmsnorm.impls import IMPLS, impl_of, source_config
from flyconfigs.kernels.fused_add_rmsnorm.reference import reference_fused_add_rms_norm
from flyconfigs.kernels.paired_evidence import DefaultUnlessEvidence
from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.kernels.rmsnorm.declaration import SPEC as RMSNORM
from flyconfigs.kernels.rmsnorm.declaration import TUNABLES as SOURCE_TUNABLES
from flyconfigs.kernels.rownorm import (
    BETWEEN_GRID,
    ELEMENT_BYTES,
    HIDDEN_SIZE_GRID,
    KEY_AXES,
    MODEL_SIZE_GRID,
    UNSEEN_GRID,
    check_row_key,
    complete_row_key,
    pow2_ceil,
    source_sha256,
    source_text,
)
from flyconfigs.kernels.rules import Rule, Rules, broken
from flyconfigs.registry.declarations import KeyAxis, KeyValue, SourceBinding, TunableVariants
from flyconfigs.registry.device import DeviceQuery
from flyconfigs.schema.models import wave_size_of_arch

if TYPE_CHECKING:
    from flyconfigs.gpu import Backend, CompileRequest
    from flyconfigs.kernels.fused_add_rmsnorm.workload import FusedAddRMSNormWorkload

__all__ = ["HIDDEN_SIZE_GRID", "IMPLS", "RULES", "SPEC", "TUNABLES", "FusedAddRMSNormSpec", "impl_of", "quantities",
           "reference_fused_add_rms_norm", "source_config", "traffic_bytes"]

BLOCK_N = tuple(1 << p for p in range(5, 16))  # 32 … 32768
ROWS = (1, 2, 4, 8, 16)
WARPS = (1, 2, 4, 8, 16, 32)
STAGES = (1, 2, 3)
MAX_TILE = 16384
"""At most this many elements in one program's tile: beyond it the tile spills."""
MAX_PER_THREAD = 64
SPACE_PER_THREAD = (4, 32)
"""Elements per thread the space searches: fewer leave threads idle on loads, more spill."""
TRITON_TUNABLES: dict[str, tuple[int, ...]] = {
    "block_n": BLOCK_N,
    "rows_per_program": ROWS,
    "num_warps": WARPS,
    "num_stages": STAGES,
}
TUNABLES: dict[str, tuple[int | str, ...]] = {"impl": IMPLS, **TRITON_TUNABLES, **SOURCE_TUNABLES}
VARIANTS = TunableVariants("impl", {"triton": tuple(TRITON_TUNABLES), "source": tuple(SOURCE_TUNABLES)})
"""Which tunables each implementation's configs hold."""
SMOKE_GRID = ("M=1,4096 N=1024,4096 dtype=bf16",)
PERF_GRID = (
    "M=1,16,256,4096,16384,65536 N=128,1024,2048,3584,4096,5120,7168,8192,12288,16384 dtype=bf16",
    "M=16,4096 N=4096,8192 dtype=fp16",
    "M=16,4096 N=4096,8192 dtype=bf16 weight_dtype=fp32",
)
"""The fused benchmark's own grid (68 keys), the ``perf`` preset ``bench/fused_add_rmsnorm.py`` times."""
MAX_CHUNKS = 64
MAX_THREADS = 1024
MAX_N = MAX_TILE * MAX_CHUNKS
"""The longest row any config runs: chunks of at most a tile, at most 64 of them."""

RULES = Rules((
    # Triton's own limits, which decide whether the kernel compiles and launches at all.
    # (Its other one, tl.arange over a power of two, every value of block_n and
    # rows_per_program already is.)
    Rule("threads-per-program", "WARPS * WAVE <= MAX_THREADS",
         "{WARPS} warps of {WAVE} threads exceed {MAX_THREADS} threads per program", asserted=False,
         origin="the CUDA and HIP limit of 1024 threads per block, which a Triton program is"),
    # The family's own rules: what it runs and times.
    Rule("tile-size", "TILE <= MAX_TILE", "a tile of {ROWS}x{BLOCK_N} exceeds {MAX_TILE} elements", asserted=False),
    Rule("chunked-one-row", "BLOCK_N >= N or ROWS == 1", "a chunked row takes one row per program", asserted=False),
    Rule("block-fits-row", "BLOCK_N <= ROW_BLOCK",
         "block_n {BLOCK_N} is wider than the row needs ({ROW_BLOCK})", asserted=False),
    Rule("one-step-one-stage", "BLOCK_N < N or STAGES == 1",
         "a row in one step has no loop to pipeline (num_stages must be 1)", asserted=False),
    Rule("chunks-per-row", "CHUNKS <= MAX_CHUNKS", "more than {MAX_CHUNKS} chunks per row", asserted=False),
    Rule("elements-per-thread", "PER_THREAD <= MAX_PER_THREAD",
         "{PER_THREAD} elements per thread exceed {MAX_PER_THREAD}", asserted=False),
    Rule("threads-have-elements", "PER_THREAD >= 1", "more threads than elements in the tile", asserted=False),
))
"""Every rule a config must meet, in the order the check reports the first broken one.
Triton compiles on first launch, so nothing is asserted in a source: the one rule that
is Triton's (``origin`` says) keeps what the check accepts to what Triton launches."""


def quantities(config: Mapping[str, object], key: Mapping[str, KeyValue], wave: int) -> dict[str, int]:
    """The quantities :data:`RULES` read: ``N``, ``BLOCK_N``, ``ROWS``, ``WARPS``,
    ``STAGES``, ``WAVE``, the tile ``TILE`` (rows × block), ``CHUNKS`` (steps per row),
    ``PER_THREAD`` (tile elements per thread, counting 32-lane warps as the space does),
    ``ROW_BLOCK`` (the widest block a row needs: its power-of-two ceiling, at least the
    narrowest block) and the limits."""
    n = int(key["N"])
    block, rows = int(config["block_n"]), int(config["rows_per_program"])  # type: ignore[call-overload]
    warps, stages = int(config["num_warps"]), int(config["num_stages"])  # type: ignore[call-overload]
    return {
        "N": n, "BLOCK_N": block, "ROWS": rows, "WARPS": warps, "STAGES": stages, "WAVE": wave,
        "TILE": rows * block, "CHUNKS": -(-n // block), "PER_THREAD": rows * block // (32 * warps),
        "ROW_BLOCK": max(BLOCK_N[0], pow2_ceil(n)),
        "MAX_TILE": MAX_TILE, "MAX_CHUNKS": MAX_CHUNKS, "MAX_PER_THREAD": MAX_PER_THREAD, "MAX_THREADS": MAX_THREADS,
    }


def traffic_bytes(m: int, n: int, dtype: str, weight_dtype: str) -> int:
    """The bytes the fused op must move: x and the residual read, the residual and y
    written (``4·M·N·sizeof(x)``), and the weight once."""
    return 4 * m * n * ELEMENT_BYTES[dtype] + n * ELEMENT_BYTES[weight_dtype]


@dataclass(frozen=True)
class FusedAddRMSNormSpec(TunableKernel, DefaultUnlessEvidence):
    """The fused add + RMSNorm family (a :class:`~flyconfigs.registry.KernelDecl` and a
    :class:`~flyconfigs.kernels.plugin.TunableKernel`); off the tuned grid it serves its
    default unless the paired measurements around the key say otherwise
    (:mod:`flyconfigs.kernels.paired_evidence`), carrying a winner past the tuned range of
    ``M`` only."""

    transfers_past_range = ("M",)

    name: str = "fused_add_rmsnorm"
    version: int = 1
    source_file: str = "fused_add_rmsnorm/kernel.py"

    @property
    def key_axes(self) -> tuple[KeyAxis, ...]:
        return KEY_AXES

    def source(self) -> str:
        """The Triton source of the kernel (the ``source`` implementation's is RMSNorm's)."""
        return source_text(self.source_file)

    def source_sha256(self) -> str:
        """sha256 of both implementations' sources (the Triton kernel's digest, then the
        RMSNorm source's, one after the other), recorded in every artifact."""
        both = f"{source_sha256(self.source_file)}{RMSNORM.source_sha256()}"
        return hashlib.sha256(both.encode("ascii")).hexdigest()

    @property
    def tunable_variants(self) -> TunableVariants:
        """``impl`` selects the implementation and the tunables its configs hold."""
        return VARIANTS

    @property
    def tunable_defaults(self) -> dict[str, KeyValue]:
        """A config without ``impl`` (every one tuned before the ``source``
        implementation existed) runs the Triton kernel."""
        return {"impl": "triton"}

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` validated against the axes; the weight is the activation dtype or fp32."""
        return check_row_key(self, key, MAX_N)

    def traffic(self, key: Mapping[str, KeyValue]) -> int:
        """Bytes one call must move (see :func:`traffic_bytes`)."""
        return traffic_bytes(int(key["M"]), int(key["N"]), str(key["dtype"]), str(key["weight_dtype"]))

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
        """``None`` when ``config`` (whose tunables the registry checked against
        :data:`TUNABLES`) can run for ``key`` on ``device``, else why not: a Triton
        config meets every rule of :data:`RULES` for its wave size (32 when unknown;
        Triton runs on NVIDIA and AMD alike), a ``source`` config every rule of the
        RMSNorm source it compiles."""
        rest = source_config(config)
        if rest is not None:
            return RMSNORM.check_config(rest, key, device)
        return self.valid(config, key, wave_size_of_arch(device.arch) if device is not None else 32)

    @property
    def source_binding(self) -> SourceBinding:
        """``version``: a change of the kernel that changes what a config means bumps
        :attr:`version`; other edits keep the artifacts tuned before them served."""
        return "version"

    def valid(self, config: Mapping[str, object], key: Mapping[str, KeyValue], wave: int = 32) -> str | None:
        """``None`` when the Triton ``config`` can run for ``key`` on a device of wave
        size ``wave``, else the first rule of :data:`RULES` it breaks, explained."""
        return broken(RULES, quantities(config, key, wave))

    def space(self, key: Mapping[str, KeyValue], device: DeviceQuery | None = None) -> list[dict[str, KeyValue]]:
        """The configs worth timing: the Triton kernel's (:meth:`triton_space`) and, where
        ``device`` is known (its compiler decides what the source builds), the source's:
        every config RMSNorm's pruned space holds for the key.  The default is always
        among them."""
        out = self.triton_space(key, device)
        if device is not None:
            norm = self.check_key(key)
            out += [{"impl": "source", **config} for config in RMSNORM.space(norm, device)]
        return out

    def triton_space(self, key: Mapping[str, KeyValue], device: DeviceQuery | None = None) -> list[dict[str, KeyValue]]:
        """The Triton configs worth timing: the whole row in one step (with several rows per
        program for rows up to 2048, never more rows than there are), or for rows of
        8192 and more chunks of 2048 or 4096 columns with 1 or 2 stages; 4–32 elements
        per thread.  The default is always among them."""
        norm = self.check_key(key)
        m, n = int(norm["M"]), int(norm["N"])
        wave = wave_size_of_arch(device.arch) if device is not None else 32
        whole = max(BLOCK_N[0], pow2_ceil(n))
        shapes: list[tuple[int, int, int]] = []
        for rows in ROWS:
            if rows == 1 or (whole <= 2048 and rows <= pow2_ceil(m)):
                shapes.append((whole, rows, 1))
        if whole >= 8192:
            shapes += [(b, 1, s) for b in (2048, 4096) for s in (1, 2)]
        out: list[dict[str, KeyValue]] = []
        for block, rows, stages in shapes:
            for warps in WARPS:
                config: dict[str, KeyValue] = {"impl": "triton", "block_n": block, "rows_per_program": rows,
                                               "num_warps": warps, "num_stages": stages}
                per_thread = rows * block // (32 * warps)
                low, high = SPACE_PER_THREAD
                if (per_thread < low and warps > 1) or per_thread > high:
                    continue
                if self.valid(config, norm, wave) is None:
                    out.append(config)
        default = self.default_config(norm, device)
        if default not in out:
            out.insert(0, default)
        return out

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The heuristic: the whole row in one step up to 16384 columns (at least 32;
        beyond, chunks of 4096, wider where the row would take more than 64), about 8
        elements per thread (1–16 warps), and for short rows enough rows per program to
        fill a 2048-element tile.  It meets :data:`RULES` for every key and device."""
        m, n = int(key["M"]), int(key["N"])
        block = max(BLOCK_N[0], min(pow2_ceil(n), MAX_TILE))
        if block < n:
            # Chunks of 4096, wider where a row would otherwise take more than MAX_CHUNKS.
            block = max(4096, pow2_ceil(-(-n // MAX_CHUNKS)))
        rows = 1
        if block <= 1024:
            rows = max(1, min(2048 // block, pow2_ceil(m), ROWS[-1]))
        warps = max(1, min(16, rows * block // 256))
        return {"impl": "triton", "block_n": block, "rows_per_program": rows, "num_warps": warps, "num_stages": 1}

    # -- tuning ---------------------------------------------------------------------

    @property
    def tunables(self) -> dict[str, tuple[int | str, ...]]:
        """Each tunable and the values it takes (``flyconfigs schema --kernel`` publishes them)."""
        return dict(TUNABLES)

    @property
    def presets(self) -> dict[str, tuple[str, ...]]:
        """``perf``: the benchmark grid of ``bench/fused_add_rmsnorm.py``; ``hidden``: the
        hidden-size grid; ``models``: the open models' hidden sizes and shards; ``unseen``:
        keys no other preset names; ``between``: more of them, some past the tuned range, for the
        serving rule; ``smoke``: four keys."""
        return {"perf": PERF_GRID, "hidden": HIDDEN_SIZE_GRID, "models": MODEL_SIZE_GRID, "unseen": UNSEEN_GRID,
                "between": BETWEEN_GRID, "smoke": SMOKE_GRID}

    def complete_key(self, key: Mapping[str, KeyValue]) -> dict[str, KeyValue]:
        """``key`` with ``weight_dtype`` defaulting to ``dtype`` (see :func:`complete_row_key`)."""
        return complete_row_key(key)

    def workload(self, key: Mapping[str, KeyValue], copies: int, backend: Backend) -> FusedAddRMSNormWorkload:
        """Rotated inputs for ``key`` (imports torch and Triton)."""
        from flyconfigs.kernels.fused_add_rmsnorm.workload import FusedAddRMSNormWorkload

        return FusedAddRMSNormWorkload(key, copies, self, backend=backend)

    def build(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue],
              device: DeviceQuery) -> CompileRequest | None:
        """A ``source`` config's compile request (RMSNorm's source with the fused
        residual add); ``None`` for a Triton config, which compiles at its first launch."""
        rest = source_config(config)
        if rest is None:
            return None
        return RMSNORM.request(rest, key, wave_size_of_arch(device.arch), residual=True)

    def tool_versions(self) -> dict[str, str]:
        """Triton's version, which decides the code every Triton config compiles to (the
        GPU layer records the compiler of the ``source`` configs, as for RMSNorm)."""
        try:
            return {"triton": metadata.version("triton")}
        except metadata.PackageNotFoundError:
            return {}


SPEC = FusedAddRMSNormSpec()
