"""vLLM's FlyDSL int4 mixture-of-experts kernel (``fused_flydsl_moe.py``), declared so that
its shipped configs can be imported, published, served and exported back.

vLLM keeps one JSON file per ``(E, N, device)``
(``configs/E=…,N=…,device_name=…,dtype=int4_w4a16,backend=flydsl.json``) mapping a batch
size ``M`` to the two stages' tiles (``tile_m``, ``tile_n``, ``tile_k`` for the first,
``tile_n2``, ``tile_k2`` for the second), and serves the entry of the nearest ``M`` as its
fused-MoE Triton kernel does (:meth:`VLLMFlyDSLMoESpec.key_distance`), a tie to the entry
first in the file (its ``tie_rank``: an imported file's rows keep its order).  At launch it
snaps each tile to the nearest one the kernel registers (``_snap_flydsl_int4_tiles``), so
any positive tile launches: :func:`launch_config` is that rule, and the config served is
the file's, unchanged.  The default is the empty config (vLLM's own default table).
"""

from __future__ import annotations

from collections.abc import Mapping

from flyconfigs.kernels.vllm_spelling import vllm_spelled_key
from flyconfigs.registry.plugin import DeviceQuery, KernelDecl, KeyAxis, KeyValue, SpelledKey, Tie, file_order

__all__ = ["SPEC", "TUNABLES", "VLLMFlyDSLMoESpec", "launch_config"]

TUNABLES = ("tile_m", "tile_n", "tile_k", "tile_n2", "tile_k2")
_REGISTERED = {"tile_m": (16, 32, 64, 128), "tile_n": (64, 128), "tile_k": (128, 256), "tile_n2": (128,),
               "tile_k2": (128, 256)}
"""The tiles vLLM 0.34's FlyDSL int4 kernels register, by tunable."""
KEY_AXES = (
    KeyAxis("E", int, minimum=1),
    KeyAxis("N", int, minimum=1),
    KeyAxis("dtype", str, choices=("int4_w4a16",)),
    KeyAxis("M", int, ordinal=True, minimum=1),
)


def launch_config(config: Mapping[str, KeyValue]) -> dict[str, int]:
    """The tiles vLLM launches for ``config``: each snapped to the nearest registered
    tile, a tie to the smaller (``min(allowed, key=lambda a: (abs(a - v), a))``)."""
    out = {}
    for name in TUNABLES:
        value = int(config[name])
        out[name] = min(_REGISTERED[name], key=lambda tile: (abs(tile - value), tile))
    return out


class VLLMFlyDSLMoESpec(KernelDecl):
    """The declaration of ``vllm_flydsl_moe`` (a :class:`~flyconfigs.registry.KernelDecl`)."""

    name = "vllm_flydsl_moe"
    version = 1
    key_axes = KEY_AXES
    own_device_first = True
    """vLLM reads the asked device's own file: its nearest batch size before a sibling's exact one."""

    def spelled_key(self, key: Mapping[str, object], device: DeviceQuery | None) -> SpelledKey:
        """``key`` in the words of vLLM's config file names (``device_name``,
        ``backend=flydsl``) or the axes' own
        (:func:`~flyconfigs.kernels.vllm_spelling.vllm_spelled_key`)."""
        return vllm_spelled_key(self.name, [a.name for a in self.key_axes], key, device,
                                "E=64,N=1536,device_name=AMD_Instinct_MI300X,dtype=int4_w4a16,backend=flydsl M=64", {})

    def key_distance(self, asked: Mapping[str, KeyValue], tuned: Mapping[str, KeyValue]) -> tuple[float, ...] | None:
        """vLLM's nearest batch size: ``(|M - m|, m)``; a tie between two rows of one file
        to the earlier row (:meth:`tie_rank`), any other to the smaller ``m``."""
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
        """``None`` when ``config`` sets exactly the five tiles, each a positive int, or is
        empty (the default: vLLM's own table)."""
        if not config:
            return None
        missing = [n for n in TUNABLES if n not in config]
        unknown = sorted(str(n) for n in config if n not in TUNABLES)
        if missing or unknown:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown else [])
            return f"not a {self.name} config: {'; '.join(parts)}"
        for name, value in config.items():
            if type(value) is not int or value < 1:
                return f"{name}={value!r} is not a positive int"
        return None

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The empty config: nothing imported, so vLLM keeps its own default table."""
        return {}


SPEC = VLLMFlyDSLMoESpec()
