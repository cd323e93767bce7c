"""vLLM's fused mixture-of-experts Triton kernel, declared so that its shipped configs can be
imported, published, served and exported back (flyconfigs neither runs nor tunes it).

vLLM keeps one JSON file per ``(E, N, device, dtype, block_shape)`` and projection
(``vllm/model_executor/layers/fused_moe/configs/E=…,N=…,device_name=…[,dtype=…][,block_shape=[n,k]][_down].json``),
each mapping a batch size ``M`` to the kernel's launch config.  Here that is the key
``E, N, dtype, block_n, block_k, down, M`` (``M`` ordinal; the others exact; ``block_n``
and ``block_k`` the quantization block, both null without one, as vLLM's
``get_moe_configs(E, N, dtype, block_n, block_k)`` takes it; ``down`` true for the
separate down-projection files, which vLLM 0.34 reads for block-quantized fp8) and the
tunables below.

**Which entry serves** is vLLM's rule (``_get_configured_moe_config``:
``configs[min(configs, key=lambda x: abs(x - M))]`` over the file as ``json.load`` read
it): the tuned ``M`` nearest by absolute difference (:meth:`VLLMFusedMoESpec.key_distance`),
a tie to the entry that comes first in the file.  An imported file is one table whose rows
keep the file's order, and the family's ``tie_rank`` is that order, so a tie goes to the
earlier row, as in vLLM, also in the three of vLLM 0.34.0's files that list their batch
sizes out of order (docs/adapters.md names them).  A tie between keys that are not rows of
one table (a down file's ``{"USE_TMA": false}`` entry is an artifact beside it) goes to the
smaller, the file's order wherever it is ascending.

**What is served** is the file's config unchanged; vLLM adjusts it at launch
(``invoke_fused_moe_kernel``), and so does :func:`launch_config`: ``SPLIT_K`` is 1,
``USE_TMA`` is taken out, and for block-quantized weights ``BLOCK_SIZE_K`` is clamped to
the smaller side of the block.  A config is valid when what it launches is: block sizes
and warps powers of two, each tile of at most 2**20 elements (Triton's largest tensor),
at most 1024 threads a program, a clamped ``BLOCK_SIZE_K`` that divides the block's ``k``.

The default is the empty config: flyconfigs does not restate vLLM's heuristic, so a
resolution that falls back (``source == "default"``) means "no imported config: let vLLM
choose its own".  This module imports neither torch nor Triton.
"""

from __future__ import annotations

from collections.abc import Mapping

from flyconfigs.errors import InvalidKeyError
from flyconfigs.kernels.vllm_spelling import vllm_spelled_key
from flyconfigs.registry.plugin import DeviceQuery, KernelDecl, KeyAxis, KeyValue, SpelledKey, Tie, file_order, normalize_key
from flyconfigs.schema.models import wave_size_of_arch

__all__ = ["OPTIONAL_TUNABLES", "REQUIRED_TUNABLES", "SPEC", "VLLMFusedMoESpec", "launch_config"]

REQUIRED_TUNABLES = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
"""What every launchable config sets."""
OPTIONAL_TUNABLES = ("SPLIT_K", "waves_per_eu", "matrix_instr_nonkdim", "kpack", "num_ctas", "USE_TMA", "grf_mode")
"""What some set: ``SPLIT_K`` (older files), the ROCm backend's launch options
(``waves_per_eu``, ``matrix_instr_nonkdim``, ``kpack``), Hopper's ``num_ctas``, whether
the TMA path may run (``USE_TMA``), and Intel XPU's register file mode (``grf_mode``)."""
NO_TMA_DOWN = {"USE_TMA": False}
"""A down-projection entry that only says "no TMA path at this batch size": vLLM then
runs the down GEMM with the up-projection's config (``experts/triton_moe.py``)."""
MAX_TILE_ELEMENTS = 2**20
"""Triton's largest tensor (``TRITON_MAX_TENSOR_NUMEL``): no tile of a launch exceeds it."""
MAX_THREADS = 1024
"""The most threads one program (a CUDA block, a HIP workgroup) runs."""
_POWERS_OF_TWO = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps", "num_ctas")
_GRF_MODES = ("128", "256", "auto", "default", "large", "small")
_ROCM_CHOICES = {"matrix_instr_nonkdim": (0, 4, 16, 32), "kpack": (1, 2)}
KEY_AXES = (
    KeyAxis("E", int, minimum=1),
    KeyAxis("N", int, minimum=1),
    KeyAxis("dtype", str, nullable=True),
    KeyAxis("block_n", int, nullable=True, minimum=1),
    KeyAxis("block_k", int, nullable=True, minimum=1),
    KeyAxis("down", bool),
    KeyAxis("M", int, ordinal=True, minimum=1),
)
EXAMPLE = "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128] M=64"
"""A key as a vLLM user writes it: the config file's name, and the batch size."""
_DEFAULTS: dict[str, KeyValue] = {"dtype": None, "block_n": None, "block_k": None, "down": False}


def launch_config(config: Mapping[str, KeyValue], key: Mapping[str, KeyValue]) -> dict[str, KeyValue]:
    """What vLLM 0.34's ``invoke_fused_moe_kernel`` launches for ``config`` at ``key``:
    ``SPLIT_K`` 1, ``USE_TMA`` removed, and ``BLOCK_SIZE_K`` at most the smaller side
    of a quantization block (``block_n``, ``block_k``)."""
    out = {name: value for name, value in config.items() if name != "USE_TMA"}
    out["SPLIT_K"] = 1
    block_n, block_k = key.get("block_n"), key.get("block_k")
    if type(block_n) is int and type(block_k) is int and type(out.get("BLOCK_SIZE_K")) is int:
        out["BLOCK_SIZE_K"] = min(int(out["BLOCK_SIZE_K"]), block_n, block_k)
    return out


class VLLMFusedMoESpec(KernelDecl):
    """The declaration of ``vllm_fused_moe`` (a :class:`~flyconfigs.registry.KernelDecl`)."""

    name = "vllm_fused_moe"
    version = 2
    """2: the key axes ``block_n``, ``block_k`` (for 1's ``block_shape``) and ``down``; the
    launch-time clamp of ``BLOCK_SIZE_K``; ``USE_TMA``, ``num_ctas`` and ``grf_mode``."""
    key_axes = KEY_AXES
    data_packages = frozenset(f"flyconfigs-vllm-fused-moe-{target}" for target in (
        "gfx1151", "gfx1201", "gfx942", "gfx950", "intel_gpu_bmg_g31", "sm100", "sm103", "sm120", "sm121", "sm80", "sm89",
        "sm90"))
    """The packages this project publishes of vLLM's config files
    (``artifacts/vllm-fused-moe-<target>``; a test keeps the two in step): they rank as the
    family owner's, above a third party's, so another package of one of their keys
    never stops them serving."""
    own_device_first = True
    """vLLM reads the asked device's own file: its nearest batch size before a sibling's exact one."""

    def spelled_key(self, key: Mapping[str, object], device: DeviceQuery | None) -> SpelledKey:
        """``key`` in the words of vLLM's config file names (``device_name``,
        ``block_shape=[n,k]``, ``_down``) or the axes' own; what a file name leaves out
        (``dtype``, ``block_n``, ``block_k``: null; ``down``: false) filled in
        (:func:`~flyconfigs.kernels.vllm_spelling.vllm_spelled_key`)."""
        return vllm_spelled_key(self.name, [a.name for a in self.key_axes], key, device, EXAMPLE, _DEFAULTS)

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` validated against the axes; ``block_n`` and ``block_k`` are both null
        (no quantization block) or both set.  :class:`InvalidKeyError` naming the axis."""
        norm = normalize_key(self, key)
        if (norm["block_n"] is None) != (norm["block_k"] is None):
            raise InvalidKeyError(f"key axes 'block_n' and 'block_k' of {self.name!r} are both null or both set, "
                                  f"got {norm['block_n']!r} and {norm['block_k']!r}")
        return norm

    def key_distance(self, asked: Mapping[str, KeyValue], tuned: Mapping[str, KeyValue]) -> tuple[float, ...] | None:
        """vLLM's nearest batch size: ``(|M - m|, m)``, nearest by absolute difference;
        every tuned ``m`` may serve (never ``None``).  A tie between two rows of one file
        goes to the earlier row (:meth:`tie_rank`); ``m`` breaks only the others,
        to the smaller."""
        m = int(tuned["M"])
        return (float(abs(int(asked["M"]) - m)), float(m))

    def tie_rank(self, asked: Mapping[str, KeyValue], tie: Tie) -> tuple[float, ...]:
        """vLLM takes the first of two equally near batch sizes in its file's order: the
        rows of one table (an imported file keeps its order) by row, the earlier first;
        keys of different files by :meth:`key_distance` (the smaller ``m``)
        (:func:`~flyconfigs.registry.search.ties.file_order`)."""
        return file_order(tie)

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
        """``None`` when vLLM can launch ``config`` at ``key`` (see the module's rules), or
        a down-projection entry is :data:`NO_TMA_DOWN`, or it is empty (the default: vLLM's
        own choice); else why not."""
        if not config or (key.get("down") is True and dict(config) == NO_TMA_DOWN):
            return None
        missing = [n for n in REQUIRED_TUNABLES if n not in config]
        unknown = sorted(str(n) for n in config if n not in REQUIRED_TUNABLES + OPTIONAL_TUNABLES)
        if missing or unknown:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown else [])
            return f"not a {self.name} config: {'; '.join(parts)}"
        typed = _typed(config)
        if typed is not None:
            return typed
        ints = {n: v for n, v in config.items() if type(v) is int}
        for name in _POWERS_OF_TWO:
            value = ints.get(name)
            if value is not None and (value < 1 or value & (value - 1)):
                return f"{name}={value} is not a power of two"
        for name, least in (("GROUP_SIZE_M", 1), ("SPLIT_K", 1)):
            if name in ints and ints[name] < least:
                return f"{name}={ints[name]}: must be at least {least}"
        for name, choices in _ROCM_CHOICES.items():
            if name in ints and ints[name] not in choices:
                return f"{name}={ints[name]}: the ROCm backend takes {', '.join(map(str, choices))}"
        wave = wave_size_of_arch(device.arch) if device is not None else 32
        if ints["num_warps"] * wave > MAX_THREADS:
            return f"num_warps={ints['num_warps']} of {wave} threads is more than {MAX_THREADS} threads a program"
        block_m, block_n = ints["BLOCK_SIZE_M"], ints["BLOCK_SIZE_N"]
        block_k = int(launch_config(config, key)["BLOCK_SIZE_K"])
        for what, size in (("BLOCK_SIZE_M x BLOCK_SIZE_K", block_m * block_k), ("BLOCK_SIZE_K x BLOCK_SIZE_N",
                           block_k * block_n), ("BLOCK_SIZE_M x BLOCK_SIZE_N", block_m * block_n)):
            if size > MAX_TILE_ELEMENTS:
                return f"a {what} tile of {size} elements is more than Triton's {MAX_TILE_ELEMENTS}"
        quant_k = key.get("block_k")
        if type(quant_k) is int and quant_k % block_k:
            return f"BLOCK_SIZE_K={block_k} (at launch) does not divide the quantization block's {quant_k}"
        return None

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The empty config: no imported config, so the caller keeps vLLM's own choice."""
        return {}


def _typed(config: Mapping[str, object]) -> str | None:
    """Why a value of ``config`` has the wrong type, or ``None``: ``USE_TMA`` is a bool,
    ``grf_mode`` one of Intel's modes, every other value a non-negative int."""
    for name, value in config.items():
        if name == "USE_TMA":
            if type(value) is not bool:
                return f"USE_TMA={value!r} is not true or false"
        elif name == "grf_mode":
            if value not in _GRF_MODES:
                return f"grf_mode={value!r} is not one of {', '.join(_GRF_MODES)}"
        elif type(value) is not int or value < 0:
            return f"{name}={value!r} is not a non-negative int"
    return None


SPEC = VLLMFusedMoESpec()
