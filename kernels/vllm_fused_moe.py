"""vLLM's fused mixture-of-experts Triton kernel, declared so that its shipped configs can be
imported, published and served (flyconfigs neither runs nor tunes it).

vLLM keeps one JSON file per ``(E, N, device, dtype, block_shape)``
(``vllm/model_executor/layers/fused_moe/configs/E=…,N=…,device_name=…[,dtype=…][,block_shape=[…]].json``),
each mapping a batch size ``M`` to the kernel's launch config, and serves the entry of the
nearest ``M``.  Here that is the key ``E, N, dtype, block_shape, M`` (``M`` ordinal; the
others exact) and the tunables below.

Validity is what the kernel and vLLM's own tuner require of a config: every block size a
power of two, warps a power of two, and for block-quantized weights (``block_shape =
[block_n, block_k]``) a ``BLOCK_SIZE_K`` that divides ``block_k``, since each K step reads
one scale (vLLM's ``benchmarks/kernels/benchmark_moe.py`` keeps only such configs).

The default is the empty config: flyconfigs does not restate vLLM's heuristic, so a
resolution that falls back (``source == "default"``) means "no imported config: let vLLM
choose its own".  This module imports neither torch nor Triton.
"""

from __future__ import annotations

from collections.abc import Mapping

from flyconfigs.errors import InvalidKeyError
from flyconfigs.registry.declarations import KernelDecl, KeyAxis, KeyValue, normalize_key
from flyconfigs.registry.device import DeviceQuery

__all__ = ["OPTIONAL_TUNABLES", "REQUIRED_TUNABLES", "SPEC", "VLLMFusedMoESpec"]

REQUIRED_TUNABLES = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
"""What every config of vLLM's files sets."""
OPTIONAL_TUNABLES = ("SPLIT_K", "waves_per_eu", "matrix_instr_nonkdim", "kpack", "num_ctas")
"""What some set: ``SPLIT_K`` (older files), and the ROCm backend's launch options."""
_POWERS_OF_TWO = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps")
KEY_AXES = (
    KeyAxis("E", int, minimum=1),
    KeyAxis("N", int, minimum=1),
    KeyAxis("dtype", str, nullable=True),
    KeyAxis("block_shape", list, nullable=True),
    KeyAxis("M", int, ordinal=True, minimum=1),
)


class VLLMFusedMoESpec(KernelDecl):
    """The declaration of ``vllm_fused_moe`` (a :class:`~flyconfigs.registry.KernelDecl`)."""

    name = "vllm_fused_moe"
    version = 1
    key_axes = KEY_AXES

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` validated against the axes; ``block_shape`` is ``None`` or two positive
        ints ``[block_n, block_k]``.  :class:`InvalidKeyError` naming the axis otherwise."""
        norm = normalize_key(self, key)
        shape = norm["block_shape"]
        if shape is not None and (len(shape) != 2 or any(type(v) is not int or v < 1 for v in shape)):
            raise InvalidKeyError(f"key axis 'block_shape' of {self.name!r} must be null or two positive ints, "
                                  f"got {shape!r}")
        return norm

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
        """``None`` when ``config`` sets every required tunable, no unknown one, each to
        an int in range, and fits the key's ``block_shape``; else why not."""
        missing = [n for n in REQUIRED_TUNABLES if n not in config]
        unknown = sorted(str(n) for n in config if n not in REQUIRED_TUNABLES + OPTIONAL_TUNABLES)
        if missing or unknown:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown else [])
            return f"not a {self.name} config: {'; '.join(parts)}"
        for name, value in config.items():
            if type(value) is not int or value < 0:
                return f"{name}={value!r} is not a non-negative int"
        for name in _POWERS_OF_TWO:
            value = int(config[name])  # type: ignore[call-overload]
            if value < 1 or value & (value - 1):
                return f"{name}={value} is not a power of two"
        if int(config["GROUP_SIZE_M"]) < 1:  # type: ignore[call-overload]
            return "GROUP_SIZE_M must be at least 1"
        shape = key.get("block_shape")
        if shape is not None:
            block_k = int(shape[1])
            if block_k % int(config["BLOCK_SIZE_K"]):  # type: ignore[call-overload]
                return f"BLOCK_SIZE_K={config['BLOCK_SIZE_K']} does not divide the quantization block's {block_k}"
        return None

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The empty config: no imported config, so the caller keeps vLLM's own choice."""
        return {}


SPEC = VLLMFusedMoESpec()
