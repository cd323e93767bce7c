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
``row_tiles``
    1: one tile of ``block_n`` columns (a row shorter than a power of two pads its
    last columns, masked); 2: the row in registers as a head of ``block_n`` columns and a
    tail of the power of two that holds the rest (``block_n < N <= 2·block_n``): a
    4352-wide row is 4096 + 256 lanes instead of 8192.
``eviction``
    ``none``, or on NVIDIA ``stream``: x (and the residual where it is not read again)
    loaded evict-first, the weight evict-last, y stored streaming (``.cs``), and a
    chunked row's stored residual kept in L2 (evict-last) for its second pass.
``weight_load``
    ``late``: the weight is loaded after the reduction, where it is used; ``early``:
    with x and the residual, before it, so its latency overlaps theirs.

The last three were added after configs had been tuned: a config that leaves them out
means 1, ``none`` and ``late`` (the kernel it was timed on).  Only the step that can
run past the row is masked (a chunked row's chunks before its last never are).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from flyconfigs.kernels.fused_add_rmsnorm.impls import IMPLS, impl_of, source_config, tail_of
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
from flyconfigs.registry.plugin import DeviceQuery, KeyAxis, KeyValue, SourceBinding, TunableVariants, check_config
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
ROW_TILES = (1, 2)
EVICTION = ("none", "stream")
WEIGHT_LOAD = ("late", "early")
CHUNKS = (1024, 2048, 4096)
"""Chunk widths the space offers for a row walked in chunks (narrower than the row)."""
DIVISOR_CHUNKS = (256, 512)
"""Narrower chunks the space adds where one divides a row no width of :data:`CHUNKS` does."""
MAX_TILE = 16384
"""At most this many elements in one program's tile: beyond it the tile spills."""
MAX_PER_THREAD = 64
SPACE_PER_THREAD = (4, 32)
"""Elements per thread the space searches: fewer leave threads idle on loads, more spill."""
TRITON_TUNABLES: dict[str, tuple[int | str, ...]] = {
    "block_n": BLOCK_N,
    "rows_per_program": ROWS,
    "num_warps": WARPS,
    "num_stages": STAGES,
    "row_tiles": ROW_TILES,
    "eviction": EVICTION,
    "weight_load": WEIGHT_LOAD,
}
TRITON_DEFAULTS: dict[str, KeyValue] = {"row_tiles": 1, "eviction": "none", "weight_load": "late"}
"""What a Triton config tuned before these tunables existed means by leaving them out."""
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
    Rule("chunked-one-row", "WHOLE == 1 or ROWS == 1", "a chunked row takes one row per program", asserted=False),
    Rule("head-and-tail", "TILES == 1 or (BLOCK_N < N and N <= 2 * BLOCK_N)",
         "row_tiles 2 splits a row of {N} into a head of block_n {BLOCK_N} columns and a tail no wider: "
         "it needs block_n < N <= 2 * block_n", asserted=False),
    # A tail tile of fewer elements (ROWS x TAIL) than the program has threads is one
    # Triton replicates across threads, and its reduction then read wrong sums on an H100:
    # one row per program, 16 warps and a 256-column tail (N = 4352), one row in a run of
    # 96 came out about 2% off, not on every run (tests/gpu, 2026-12-07 and -08); every
    # config whose tail tile covers its threads passed.  Seen on an H100 only; kept on
    # every device, where Triton lays tiles out alike.
    Rule("tail-fills-threads", "TAIL == 0 or ROWS * TAIL >= WARPS * WAVE",
         "a tail tile of {ROWS}x{TAIL} elements is smaller than the program's {WARPS} warps of {WAVE} threads",
         asserted=False),
    Rule("hints-on-nvidia", "HINTS == 0 or NVIDIA == 1", "eviction stream is offered on NVIDIA GPUs only",
         asserted=False),
    Rule("block-fits-row", "BLOCK_N <= ROW_BLOCK",
         "block_n {BLOCK_N} is wider than the row needs ({ROW_BLOCK})", asserted=False),
    Rule("one-step-one-stage", "WHOLE == 0 or STAGES == 1",
         "a row in one step has no loop to pipeline (num_stages must be 1)", asserted=False),
    Rule("chunks-per-row", "CHUNKS <= MAX_CHUNKS", "more than {MAX_CHUNKS} chunks per row", asserted=False),
    Rule("elements-per-thread", "PER_THREAD <= MAX_PER_THREAD",
         "{PER_THREAD} elements per thread exceed {MAX_PER_THREAD}", asserted=False),
    Rule("threads-have-elements", "PER_THREAD >= 1", "more threads than elements in the tile", asserted=False),
))
"""Every rule a config must meet, in the order the check reports the first broken one.
Triton compiles on first launch, so nothing is asserted in a source: the one rule that
is Triton's (``origin`` says) keeps what the check accepts to what Triton launches."""


def quantities(config: Mapping[str, object], key: Mapping[str, KeyValue], wave: int,
               nvidia: bool = True) -> dict[str, int]:
    """The quantities :data:`RULES` read: ``N``, ``BLOCK_N``, ``ROWS``, ``WARPS``,
    ``STAGES``, ``WAVE``, ``TILES`` (``row_tiles``), ``TAIL`` (the tail tile's columns,
    0 for none), ``WHOLE`` (1 where the row stays in registers: one tile holds it, or a
    head and a tail), ``HINTS`` (1 for ``eviction`` ``stream``), ``NVIDIA`` (1 on an
    NVIDIA device or an unknown one), the tile ``TILE`` (rows × the columns of its
    tiles), ``CHUNKS`` (steps per row), ``PER_THREAD`` (tile elements per thread,
    counting 32-lane warps as the space does), ``ROW_BLOCK`` (the widest block a row
    needs: its power-of-two ceiling, at least the narrowest block) and the limits.  A
    config that leaves out a tunable of :data:`TRITON_DEFAULTS` means its default."""
    n = int(key["N"])
    block, rows = int(config["block_n"]), int(config["rows_per_program"])  # type: ignore[call-overload]
    warps, stages = int(config["num_warps"]), int(config["num_stages"])  # type: ignore[call-overload]
    tiles = int(config.get("row_tiles", 1))  # type: ignore[call-overload]
    tail = tail_of(config, n)
    whole = int(block >= n or tail > 0)
    tile = rows * (block + tail)
    return {
        "N": n, "BLOCK_N": block, "ROWS": rows, "WARPS": warps, "STAGES": stages, "WAVE": wave,
        "TILES": tiles, "TAIL": tail, "WHOLE": whole, "NVIDIA": int(nvidia),
        "HINTS": int(config.get("eviction", "none") == "stream"),
        "TILE": tile, "CHUNKS": 1 if whole else -(-n // block), "PER_THREAD": tile // (32 * warps),
        "ROW_BLOCK": max(BLOCK_N[0], pow2_ceil(n)),
        "MAX_TILE": MAX_TILE, "MAX_CHUNKS": MAX_CHUNKS, "MAX_PER_THREAD": MAX_PER_THREAD, "MAX_THREADS": MAX_THREADS,
    }


def _nvidia(device: DeviceQuery | None) -> bool:
    """Whether ``device`` is an NVIDIA GPU (or unknown: what the Triton configs may hold is
    decided where it is known)."""
    return device is None or device.vendor == "nvidia"


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
        implementation existed) runs the Triton kernel; one without the Triton
        kernel's later tunables means :data:`TRITON_DEFAULTS`."""
        return {"impl": "triton", **TRITON_DEFAULTS}

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
        return self.valid(config, key, wave_size_of_arch(device.arch) if device is not None else 32,
                          _nvidia(device))

    @property
    def source_binding(self) -> SourceBinding:
        """``version``: a change of the kernel that changes what a config means bumps
        :attr:`version`; other edits keep the artifacts tuned before them served."""
        return "version"

    def valid(self, config: Mapping[str, object], key: Mapping[str, KeyValue], wave: int = 32,
              nvidia: bool = True) -> str | None:
        """``None`` when the Triton ``config`` can run for ``key`` on a device of wave
        size ``wave`` (an NVIDIA one where ``nvidia``), else the first rule of
        :data:`RULES` it breaks, explained."""
        return broken(RULES, quantities(config, key, wave, nvidia))

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
        """The Triton configs worth timing, 4–32 elements per thread:

        - the whole row in one tile (with several rows per program for rows up to 2048,
          never more rows than there are);
        - for a row that is not a power of two long, the row as a head and a tail
          (``row_tiles`` 2, one row per program), where that pads fewer lanes than one tile;
        - at any row length, the row walked in chunks of 1024, 2048 or 4096 columns
          narrower than it, with 1 or 2 stages (4–16 elements per thread), and of 256 or
          512 where one of those divides the row and no wider one does;
        - each with ``eviction`` ``stream`` beside ``none`` (on NVIDIA; for chunks at one
          stage), and one row in registers per program with ``weight_load`` ``early``
          beside ``late``.

        The default is always among them."""
        norm = self.check_key(key)
        m, n = int(norm["M"]), int(norm["N"])
        wave = wave_size_of_arch(device.arch) if device is not None else 32
        nvidia = _nvidia(device)
        whole = max(BLOCK_N[0], pow2_ceil(n))
        # (block, rows, stages, row_tiles, whole row, per-thread limit)
        shapes: list[tuple[int, int, int, int, bool, int]] = []
        low, high = SPACE_PER_THREAD
        for rows in ROWS:
            if rows == 1 or (whole <= 2048 and rows <= pow2_ceil(m)):
                shapes.append((whole, rows, 1, 1, True, high))
        head = whole // 2
        if head >= BLOCK_N[0] and head < n and head + max(BLOCK_N[0], pow2_ceil(n - head)) < whole:
            shapes.append((head, 1, 1, 2, True, high))
        chunks = [b for b in CHUNKS if b < n]
        if n % 1024 and not any(n % b == 0 for b in chunks):
            chunks = [b for b in DIVISOR_CHUNKS if n % b == 0 and b < n][-1:] + chunks
        shapes += [(b, 1, st, 1, False, 16) for b in chunks for st in (1, 2) if -(-n // b) <= MAX_CHUNKS]
        out: list[dict[str, KeyValue]] = []
        for block, rows, stages, tiles, in_registers, most in shapes:
            variants = [("none", "late")]
            if nvidia and stages == 1:
                variants.append(("stream", "late"))
            if in_registers and rows == 1:
                variants.append(("none", "early"))
            for warps in WARPS:
                cells = rows * (block + tail_of({"row_tiles": tiles, "block_n": block}, n))
                per_thread = cells // (32 * warps)
                if (per_thread < low and warps > 1) or per_thread > most:
                    continue
                for eviction, weight_load in variants:
                    config: dict[str, KeyValue] = {
                        "impl": "triton", "block_n": block, "rows_per_program": rows, "num_warps": warps,
                        "num_stages": stages, "row_tiles": tiles, "eviction": eviction, "weight_load": weight_load}
                    if self.valid(config, norm, wave, nvidia) is None:
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
        return {"impl": "triton", "block_n": block, "rows_per_program": rows, "num_warps": warps, "num_stages": 1,
                **TRITON_DEFAULTS}

    def adapt_config(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> dict[str, KeyValue] | None:
        """``config`` (a winner tuned at another key, which the check refuses for ``key``)
        made to fit ``key`` with the least change, or ``None`` (valid as it is, or no
        change found).  A ``source`` config is adapted as RMSNorm adapts it.  A Triton
        config keeps its way of walking the row: one that held its row in one tile wider
        than this row needs holds this one in the tile it needs; a head and a tail take
        the head this row needs (one tile where the row is a power of two); then the
        warps nearest the tuned ones, then fewer rows per program, and one stage where
        the row stays in registers.  Everything else is kept."""
        if check_config(self, config, key, device) is None:
            return None
        rest = source_config(config)
        if rest is not None:
            adapted_rest = RMSNORM.adapt_config(rest, key, device)
            return None if adapted_rest is None else {"impl": "source", **adapted_rest}
        try:
            block, rows = int(config["block_n"]), int(config["rows_per_program"])
            warps, tiles = int(config["num_warps"]), int(config.get("row_tiles", 1))
        except (KeyError, TypeError, ValueError):
            return None
        n = int(key["N"])
        row_block = max(BLOCK_N[0], pow2_ceil(n))
        bases: list[dict[str, KeyValue]] = []
        if tiles == 2:
            if row_block != n and row_block // 2 >= BLOCK_N[0]:
                bases.append({**config, "block_n": row_block // 2, "num_stages": 1})
            bases.append({**config, "block_n": row_block, "row_tiles": 1, "num_stages": 1})
        elif block > row_block:
            bases.append({**config, "block_n": row_block, "num_stages": 1})
        else:
            bases.append(dict(config))
        nearest = sorted(WARPS, key=lambda w: (abs(w.bit_length() - warps.bit_length()), -w))
        for base in bases:
            for r in (x for x in ROWS[::-1] if x <= rows):
                for w in nearest:
                    adapted: dict[str, KeyValue] = {**base, "rows_per_program": r, "num_warps": w}
                    if check_config(self, adapted, key, device) is None:
                        return adapted
        return None

    def pass_over_neighbour(self, asked: Mapping[str, KeyValue], tuned: Mapping[str, KeyValue],
                            config: Mapping[str, Any], device: DeviceQuery) -> str | None:
        """Why a Triton config tuned at ``tuned`` is not served for ``asked`` (``None``:
        it may be): one that held the tuned row in registers would walk the asked row in
        chunks twice (a 4096-wide tile at a 4352-wide row: a second pass over a 256-column
        chunk of 4096 lanes), another kernel than the one timed."""
        if source_config(config) is not None:
            return None
        try:
            block = int(config["block_n"])
            tiles = int(config.get("row_tiles", 1))
        except (KeyError, TypeError, ValueError):
            return None
        n_tuned, n_asked = int(tuned["N"]), int(asked["N"])
        whole_tuned = block >= n_tuned or (tiles == 2 and block < n_tuned <= 2 * block)
        whole_asked = block >= n_asked or (tiles == 2 and block < n_asked <= 2 * block)
        if whole_tuned and not whole_asked:
            return (f"block_n {block} held the row of {n_tuned} in registers; a row of {n_asked} "
                    f"would be walked in chunks twice")
        return None

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
