"""The RMSNorm kernel family: its key, tunable space, default heuristic and reference.

``y = x * rsqrt(mean(x**2) + eps) * w`` over the last dimension, fp32 accumulation.
This module is the family's declaration and imports neither torch nor a GPU runtime;
the op users call lives in :mod:`flyconfigs.kernels.rmsnorm.op`.

Tunables (see ``rmsnorm.cu``):

``threads``
    threads per row: a sub-warp (8, 16), a warp, or a block of up to 1024.
``rows_per_block``
    rows one block normalizes (block size = threads × rows ≤ 1024).
``vector_bytes``
    bytes per load/store: 16, 8, 4, or 0 for the scalar path.  A row whose length or
    stride is not a multiple of the vector takes the scalar path at run time.
``row_storage``
    where the row waits between the reduction and the write: ``reg`` (registers),
    ``smem`` (shared memory) or ``reread`` (read x again).
``occupancy``
    the occupancy hint: minimum blocks per SM on CUDA, waves per EU on AMD; 0 = none.
``cluster``
    blocks that share one row: 1, or on NVIDIA sm90 and later a thread-block cluster of
    2, 4 or 8, each block taking a contiguous slice of the row and the partial sums met
    in distributed shared memory.  Configs written before this tunable existed omit it;
    they mean 1.
``cache_hints``
    ``none``, or on NVIDIA sm80 and later ``stream``: the last read of x is evicted from
    L2 first, y is stored streaming (``st.global.cs``) and, with ``reread``, the first of
    the two reads keeps x in L2 (evict last).  Configs written before this tunable
    existed omit it; they mean ``none``.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flyconfigs.kernels.paired_evidence import DefaultUnlessEvidence, PairedEvidence
from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.kernels.rmsnorm import default as rmsnorm_default
from flyconfigs.kernels.rmsnorm.model import MODEL, RMSNormCostModel
from flyconfigs.kernels.rmsnorm.tunables import NEUTRAL, cluster_of, hints_of
from flyconfigs.kernels.rmsnorm.validity import MAX_BLOCK, MAX_REG_FLOATS, RULES, quantities, source_with_rules
from flyconfigs.kernels.rownorm import (
    BETWEEN_GRID,
    DTYPES,
    ELEMENT_BYTES,
    HIDDEN_SIZE_GRID,
    KEY_AXES,
    MAX_INDEX,
    MODEL_SIZE_GRID,
    UNSEEN_GRID,
    check_row_key,
    complete_row_key,
    pow2_ceil,
    source_text,
)
from flyconfigs.kernels.rules import broken
from flyconfigs.registry.plugin import DeviceQuery, KeyAxis, KeyValue, SourceBinding, check_config
from flyconfigs.schema.models import wave_size_of_arch

if TYPE_CHECKING:
    from flyconfigs.gpu import Backend, CompileRequest
    from flyconfigs.kernels.rmsnorm.workload import RMSNormWorkload
    from flyconfigs.schema.models import Device

__all__ = ["DTYPES", "ELEMENT_BYTES", "MAX_N", "PERF_GRID", "SPEC", "TUNABLES", "RMSNormSpec", "cache_hints_of", "cluster_of",
           "hints_of", "max_cluster_of",
           "reference_rms_norm", "traffic_bytes"]

THREADS = (8, 16, 32, 64, 128, 256, 512, 1024)
ROWS = (1, 2, 4, 8, 16, 32)
VECTOR_BYTES = (16, 8, 4, 0)
STORAGE = ("reg", "smem", "reread")
OCCUPANCY = (0, 2, 4)
CLUSTER = (1, 2, 4, 8)
CACHE_HINTS = ("none", "stream")
MAX_N = MAX_INDEX - MAX_BLOCK
"""The longest row the source compiles for: it counts a row's vectors, and a block's
threads past them, in 32-bit ``int`` constants (``SLICE + TPR - 1``), and C++ refuses a
constant that overflows, whatever the config."""
PERF_GRID = (
    "M=1,16,128,1024,4096,16384,65536 N=1024,2048,4096,5120,8192,16384 dtype=bf16",
    "M=4096,65536 N=4096,8192 dtype=fp16,fp32",
)
"""The benchmark grid, the ``perf`` preset (``bench/rmsnorm.py`` times it)."""
TUNABLES: dict[str, tuple[int | str, ...]] = {
    "threads": THREADS,
    "rows_per_block": ROWS,
    "vector_bytes": VECTOR_BYTES,
    "row_storage": STORAGE,
    "occupancy": OCCUPANCY,
    "cluster": CLUSTER,
    "cache_hints": CACHE_HINTS,
}


def traffic_bytes(m: int, n: int, dtype: str, weight_dtype: str) -> int:
    """The bytes RMSNorm must move: ``2·M·N·sizeof(x) + N·sizeof(w)``."""
    return 2 * m * n * ELEMENT_BYTES[dtype] + n * ELEMENT_BYTES[weight_dtype]


@dataclass(frozen=True)
class RMSNormSpec(TunableKernel, DefaultUnlessEvidence):
    """The RMSNorm family (a :class:`~flyconfigs.kernels.plugin.TunableKernel`); off the tuned grid it
    serves its default unless the paired measurements around the key say otherwise
    (:mod:`flyconfigs.kernels.paired_evidence`), with the variance-aware test; a winner is
    carried past the tuned range of ``M`` (long batches stream alike), never past that of
    ``N`` (register budgets change)."""

    transfers_past_range = ("M",)
    # The variance-aware test, not the fixed margins: what each served, hiding each of the
    # H100's 548 keys, re-timed on an H100 in one measurement per key
    # (bench/loo_remeasure.py): 1 key more than 3% slower than the default against 5, at
    # 1.0157x against 1.0137x over the fastest (the key's own winner 1.0022x).
    paired_evidence = PairedEvidence(margin=0.005, confidence=2.0)

    name: str = "rmsnorm"
    version: int = 1
    source_file: str = "rmsnorm/rmsnorm.cu"
    entry: str = "rmsnorm_kernel"
    residual_entry: str = "fused_add_rmsnorm_kernel"
    """The source's fused residual-add kernel (``-DFC_RESIDUAL=1``), which the fused add +
    RMSNorm family runs as its ``source`` implementation with these same configs."""

    @property
    def key_axes(self) -> tuple[KeyAxis, ...]:
        return KEY_AXES

    def source(self) -> str:
        """The single C++ source, for hipRTC and NVRTC alike, with the asserted rules of
        :data:`~flyconfigs.kernels.rmsnorm.validity.RULES` in it."""
        return source_with_rules(source_text(self.source_file), self.source_file)

    def source_sha256(self) -> str:
        """sha256 of :meth:`source` (the rules in it included), recorded in every artifact."""
        return hashlib.sha256(self.source().encode("utf-8")).hexdigest()

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` validated (see :func:`~flyconfigs.registry.normalize_key`); the weight
        must be the activation dtype or fp32 and the row at most :data:`MAX_N` long
        (:class:`~flyconfigs.errors.InvalidKeyError` else)."""
        return check_row_key(self, key, MAX_N)

    def traffic(self, key: Mapping[str, KeyValue]) -> int:
        """Bytes one call must move (see :func:`traffic_bytes`)."""
        return traffic_bytes(int(key["M"]), int(key["N"]), str(key["dtype"]), str(key["weight_dtype"]))

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
        """``None`` when ``config`` (whose tunables the registry checked against
        :data:`TUNABLES`) can run for ``key`` on ``device`` (wave size and clusters from
        its arch), else why not."""
        return self.valid(config, key, _wave_of(device), max_cluster_of(device), cache_hints_of(device))

    @property
    def source_binding(self) -> SourceBinding:
        """``version``: a change of the source that changes what a config means bumps
        :attr:`version`; every other edit keeps the artifacts tuned before it served
        (the validity rules still decide each config)."""
        return "version"

    # -- the space --------------------------------------------------------------------

    def valid(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue], wave: int,
              max_cluster: int = 1, cache_hints: bool = False) -> str | None:
        """``None`` when ``config`` can run for ``key`` on a device of wave size ``wave``
        whose thread-block clusters hold up to ``max_cluster`` blocks (1: none) and which
        takes cache hints where ``cache_hints``, else the first rule of
        :data:`~flyconfigs.kernels.rmsnorm.validity.RULES` it breaks, explained.  The
        source asserts the same rules, so a config valid here compiles."""
        try:
            # The rules read the config, the row (N, dtype) and the device, never M: a
            # table's rows of one row length share the answer.
            n, dtype = key["N"], key["dtype"]
            memo = (tuple(config.items()), tuple(map(type, config.values())), n, type(n), dtype, wave, max_cluster,
                    cache_hints)
            hash(memo)
        except (KeyError, TypeError):
            return broken(RULES, quantities(config, key, wave, max_cluster, cache_hints))
        return _valid(memo)

    def adapt_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> dict[str, KeyValue] | None:
        """``config`` (a winner tuned at another key) made to fit ``key`` on ``device``
        with the least change: the widest vector width that divides the row and holds an
        element (the scalar path when none does), everything else kept.  ``None`` when
        that does not make it valid (e.g. its threads outnumber the row's vectors), or
        when it is valid as it is (nothing to adapt).  Validity is the registry's whole
        check (the declared tunables, then :meth:`check_config`), as for any served config."""
        if check_config(self, config, key, device) is None:
            return None
        asked = config.get("vector_bytes")
        if type(asked) is not int:
            return None
        n, esize = int(key["N"]), ELEMENT_BYTES[str(key["dtype"])]
        # Never wider than the tuned width (the tuner chose it for the threads and rows
        # kept); only widths that hold an element and divide the row are worth a check.
        for vbytes in (v for v in VECTOR_BYTES if v == 0 or (esize <= v < asked and n * esize % v == 0)):
            adapted: dict[str, KeyValue] = {**config, "vector_bytes": vbytes}
            if check_config(self, adapted, key, device) is None:
                return adapted
        return None

    def space(self, key: Mapping[str, object], device: DeviceQuery | None = None, wave: int | None = None) -> list[dict[str, KeyValue]]:
        """Every valid config for ``key``, pruned to the ones worth timing: the two widest
        vector widths the row allows (the scalar path only when none does), 1–16 vectors
        per thread, rows per block never beyond the rows there are, shared-memory rows
        only for N ≥ 8192, a second read only when a thread holds more than 8 values, and
        clusters (where ``device`` has them) only for few rows (M ≤ 256) or long ones
        (N ≥ 12288).  Never empty: the default is always valid."""
        norm = self.check_key(key)
        w = wave or _wave_of(device)
        out = self.candidates_on(norm, device, w)
        default = self._default(norm, device, w, out)
        if default not in out:
            out.insert(0, default)
        return out

    def candidates_on(self, norm: Mapping[str, KeyValue], device: DeviceQuery | Device | None,
                      w: int) -> list[dict[str, KeyValue]]:
        """:meth:`candidates` with the clusters and cache hints ``device`` (a query or an
        artifact's descriptor) takes."""
        return self.candidates(norm, w, max_cluster_of(device), cache_hints_of(device))

    def candidates(self, norm: Mapping[str, KeyValue], w: int, max_cluster: int = 1,
                   cache_hints: bool = False) -> list[dict[str, KeyValue]]:
        """The configs :meth:`space` prunes to, before it adds the default (``norm`` a
        checked key, ``w`` the wave size, ``max_cluster`` the largest cluster the device
        runs, ``cache_hints`` whether it takes cache hints).  ``stream`` is offered only
        for few rows (M ≤ 16), where it was measured to pay on the H200; over many rows
        it mostly lost (``bench/results/rmsnorm-cache-hints-h200.json``)."""
        m, n = int(norm["M"]), int(norm["N"])
        # The space reads M only through these four facts (rows per block never beyond
        # the rows there are; few rows for clusters, cache hints and a register cap), so
        # rows of one class share one enumeration: a nearest-key resolve asks for the
        # space of many keys, and each enumeration checks ~1,000 configs.
        m_class = (min(pow2_ceil(m), ROWS[-1]), m <= 16, m <= 256, m < 1024)
        found = _candidates(self, m_class, n, str(norm["dtype"]), w, max_cluster, cache_hints)
        return [dict(config) for config in found]

    # -- the default ------------------------------------------------------------------

    def default_config(
        self, key: Mapping[str, KeyValue], device: DeviceQuery | None, wave: int | None = None
    ) -> dict[str, KeyValue]:
        """The learned default (:mod:`flyconfigs.kernels.rmsnorm.default`): the config
        whose shape came closest to the best at the nearest tuned keys of the reference
        device, rows scaled by ``device``'s compute units; always a config of the key's
        space.  Where the table lists no shape that is, :meth:`rule_of_thumb`."""
        w = wave or _wave_of(device)
        norm = complete_row_key(key)
        return self._default(norm, device, w, self.candidates_on(norm, device, w))

    def _default(self, norm: Mapping[str, KeyValue], device: DeviceQuery | None, w: int,
                 candidates: list[dict[str, KeyValue]]) -> dict[str, KeyValue]:
        units = device.compute_units if device is not None else None
        chosen = rmsnorm_default.choose(rmsnorm_default.table(), norm, units, candidates)
        return dict(chosen) if chosen is not None else self.rule_of_thumb(norm, w)

    def rule_of_thumb(self, key: Mapping[str, KeyValue], w: int) -> dict[str, KeyValue]:
        """The hand-written heuristic: the widest vector the row allows; for short rows a
        sub-warp or warp per row and several rows per block; for longer rows enough
        threads that each holds about 4 vectors in registers (64–1024 threads); more
        rows per block when the rows are short and many.  Always valid."""
        m, n = int(key["M"]), int(key["N"])
        esize = ELEMENT_BYTES[str(key["dtype"])]
        vbytes = next((v for v in (16, 8, 4) if v >= esize and (n * esize) % v == 0), 0)
        vec = vbytes // esize if vbytes else 1
        vectors = -(-n // vec)
        if vectors <= 4 * w:
            threads = max(8, min(w, pow2_ceil(-(-vectors // 4))))
        else:
            threads = min(MAX_BLOCK, max(2 * w, pow2_ceil(-(-vectors // 4))))
        rows = 1
        if threads < 256:
            rows = max(1, min(256 // threads, pow2_ceil(m)))
        while threads * rows % w and rows < 32:
            rows *= 2
        config: dict[str, KeyValue] = {
            "threads": threads,
            "rows_per_block": rows,
            "vector_bytes": vbytes,
            "row_storage": "reg",
            "occupancy": 0,
            "cluster": 1,
            "cache_hints": "none",
        }
        per_thread = -(-n // (threads * vec)) * vec
        if per_thread > MAX_REG_FLOATS:
            config["row_storage"] = "reread"
        return config

    # -- the launch geometry ----------------------------------------------------------

    def grid(self, config: Mapping[str, KeyValue], m: int) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """Grid, block and dynamic shared-memory bytes for ``m`` rows."""
        threads, rows = int(config["threads"]), int(config["rows_per_block"])
        return (-(-m // rows) * cluster_of(config), 1, 1), (threads * rows, 1, 1), 0

    # -- tuning (the plugin protocol of flyconfigs.kernels.plugin) ---------------------

    @property
    def tunables(self) -> dict[str, tuple[int | str, ...]]:
        """Each tunable and the values it takes (``flyconfigs schema --kernel`` publishes them)."""
        return dict(TUNABLES)

    @property
    def tunable_defaults(self) -> dict[str, KeyValue]:
        """Tunables a config written before them may leave out, and what that means."""
        return dict(NEUTRAL)

    def complete_config(self, config: Mapping[str, KeyValue]) -> dict[str, KeyValue]:
        """``config`` with every tunable it leaves out at the value that means."""
        return {**NEUTRAL, **config}

    @property
    def cost_model(self) -> RMSNormCostModel:
        """The model that ranks compiled configs for ``flyconfigs predict``."""
        return MODEL

    @property
    def presets(self) -> dict[str, tuple[str, ...]]:
        """Named key grids: ``perf`` is the benchmark grid of ``bench/rmsnorm.py``,
        ``hidden`` the hidden sizes of popular models, ``models`` those of the open models
        people serve and their tensor-parallel shards at row counts that are not powers of
        two, ``unseen`` row lengths and counts no other preset names (``bench/off_grid.py``),
        ``between`` more of them, some past the tuned range, for the serving rule."""
        return {"perf": PERF_GRID, "hidden": HIDDEN_SIZE_GRID, "models": MODEL_SIZE_GRID, "unseen": UNSEEN_GRID,
                "between": BETWEEN_GRID}

    def complete_key(self, key: Mapping[str, KeyValue]) -> dict[str, KeyValue]:
        """``key`` with ``weight_dtype`` defaulting to ``dtype`` (see :func:`complete_row_key`)."""
        return complete_row_key(key)

    def build(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue], device: DeviceQuery) -> CompileRequest:
        """The single source specialised for ``config`` and ``key`` on ``device``'s wave size."""
        return self.request(config, key, _wave_of(device))

    def workload(self, key: Mapping[str, KeyValue], copies: int, backend: Backend) -> RMSNormWorkload:
        """Rotated inputs for ``key`` (imports torch)."""
        from flyconfigs.kernels.rmsnorm.workload import RMSNormWorkload

        return RMSNormWorkload(key, copies, backend, self)

    def request(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue], wave: int,
                residual: bool = False) -> CompileRequest:
        """The compile request of ``config`` at ``key`` for a device of wave size ``wave``:
        :attr:`entry`, or with ``residual`` the fused residual-add kernel :attr:`residual_entry`."""
        from flyconfigs.gpu import CompileRequest

        entry = self.residual_entry if residual else self.entry
        return CompileRequest(self.source(), entry, tuple(self.defines(config, key, wave, residual)))

    def defines(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue], wave: int,
                residual: bool = False) -> list[str]:
        """Compiler ``-D`` options that specialise the source for ``config`` and ``key``
        (with ``residual``, for the fused residual-add kernel)."""
        storage = {"reg": 0, "smem": 1, "reread": 2}[str(config["row_storage"])]
        dtype_id = {"fp32": 0, "fp16": 1, "bf16": 2}
        return [
            f"-DFC_N={int(key['N'])}",
            f"-DFC_X_DTYPE={dtype_id[str(key['dtype'])]}",
            f"-DFC_W_DTYPE={dtype_id[str(key['weight_dtype'])]}",
            f"-DFC_THREADS={int(config['threads'])}",
            f"-DFC_ROWS={int(config['rows_per_block'])}",
            f"-DFC_VEC_BYTES={int(config['vector_bytes'])}",
            f"-DFC_STORAGE={storage}",
            f"-DFC_OCCUPANCY={int(config['occupancy'])}",
            f"-DFC_CLUSTER={cluster_of(config)}",
            f"-DFC_WAVE={wave}",
            # The kernel's bits: 1 last read of x evict-first, 2 reread's first read
            # evict-last, 4 streaming stores.  "none" adds no option: the same cubins as
            # before the tunable existed.
            *(["-DFC_CACHE=7"] if hints_of(config) == "stream" else []),
            # Absent for RMSNorm itself: its requests, and so its cache entries, as before.
            *(["-DFC_RESIDUAL=1"] if residual else []),
        ]


@functools.lru_cache(maxsize=2048)
def _candidates(spec: RMSNormSpec, m_class: tuple[int, bool, bool, bool], n: int, dtype: str, w: int,
                max_cluster: int, cache_hints: bool) -> tuple[tuple[tuple[str, KeyValue], ...], ...]:
    """:meth:`RMSNormSpec.candidates` for rows of ``m_class`` (the smallest power of two
    at least M, capped at the most rows a block takes; M ≤ 16; M ≤ 256; M < 1024), as
    item tuples."""
    rows_cap, few16, few256, under1024 = m_class
    esize = ELEMENT_BYTES[dtype]
    row = {"N": n, "dtype": dtype}
    widths = [v for v in VECTOR_BYTES if v and v >= esize and (n * esize) % v == 0][:2] or [0]
    # A cluster pays where one block per row leaves the GPU idle (few rows) or a row
    # is too long for one block's registers; each block keeps at least 1 KB of it.
    clusters = [c for c in CLUSTER if c <= max_cluster and (
        c == 1 or ((few256 or n >= 12288) and n * esize >= max(8192, 1024 * c)))]
    hints = [h for h in CACHE_HINTS if h == "none" or cache_hints]
    out = []
    for threads, rows, vbytes, storage, occ, cluster, hint in itertools.product(
            THREADS, ROWS, widths, STORAGE, OCCUPANCY, clusters, hints):
        vec = vbytes // esize if vbytes else 1
        part = -(-n // cluster)
        per_thread = -(-part // (threads * vec))
        if rows > 1 and rows > rows_cap:
            continue
        if per_thread > 16 or (threads > w and threads * vec > 2 * part):
            continue
        if cluster > 1 and (storage != "reg" or rows > 1 or per_thread > 8):
            continue
        if storage == "smem" and n < 8192:
            continue
        if storage == "reread" and per_thread * vec <= 8:
            continue
        # Four resident blocks (a register cap) pay only where a row is streamed from
        # memory again or from shared memory, across enough rows to fill the GPU.
        if occ == 4 and (storage == "reg" or threads * rows > 512 or under1024):
            continue
        if hint != "none" and (not few16 or vbytes == 0):
            continue
        config: dict[str, KeyValue] = {
            "threads": threads,
            "rows_per_block": rows,
            "vector_bytes": vbytes,
            "row_storage": storage,
            "occupancy": occ,
            "cluster": cluster,
            "cache_hints": hint,
        }
        if spec.valid(config, row, w, max_cluster, cache_hints) is None:
            out.append(tuple(config.items()))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _valid(memo: tuple[Any, ...]) -> str | None:
    """:meth:`RMSNorm.valid` of the config items, row and device in ``memo``."""
    items, _, n, _, dtype, wave, max_cluster, cache_hints = memo
    return broken(RULES, quantities(dict(items), {"N": n, "dtype": dtype}, wave, max_cluster, cache_hints))


def _wave_of(device: DeviceQuery | None) -> int:
    return wave_size_of_arch(device.arch) if device is not None else 32


def cache_hints_of(device: DeviceQuery | Device | None) -> bool:
    """Whether ``device`` takes the kernel's L2 cache hints: NVIDIA sm80 and later
    (``createpolicy``); no other device, and no unknown one."""
    return _sm_at_least(device.vendor, device.arch, 80) if device is not None else False


def max_cluster_of(device: DeviceQuery | Device | None) -> int:
    """The largest portable thread-block cluster ``device`` (a query or an artifact's
    descriptor) runs: 8 on NVIDIA sm90 and later, else 1 (none; also for an unknown device)."""
    return _max_cluster(device.vendor, device.arch) if device is not None else 1


@functools.cache
def _sm_at_least(vendor: str, arch: str, version: int) -> bool:
    found = re.fullmatch(r"sm(\d+)[a-z]?", arch) if vendor == "nvidia" else None
    return found is not None and int(found.group(1)) >= version


def _max_cluster(vendor: str, arch: str) -> int:
    return max(CLUSTER) if _sm_at_least(vendor, arch, 90) else 1


def reference_rms_norm(x: Any, weight: Any, eps: float) -> Any:
    """The float64 reference: works on torch tensors (on any device) and numpy arrays."""
    if hasattr(x, "double") and hasattr(x, "pow"):
        xd = x.double()
        rms = (xd.pow(2).mean(dim=-1, keepdim=True) + eps).rsqrt()
        return xd * rms * weight.double()
    import numpy as np

    xd = np.asarray(x, dtype=np.float64)
    rms = 1.0 / np.sqrt((xd**2).mean(axis=-1, keepdims=True) + eps)
    return xd * rms * np.asarray(weight, dtype=np.float64)


SPEC = RMSNormSpec()
