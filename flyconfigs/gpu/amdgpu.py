"""Resource usage from an AMDGPU code object, without a GPU.

The code object is an ELF file whose ``NT_AMDGPU_METADATA`` note (owner ``AMDGPU``)
holds msgpack metadata with, per kernel, VGPR/AGPR/SGPR counts, spill counts, LDS
(group segment) and scratch (private segment) sizes, the wavefront size and the maximum
workgroup size.  Occupancy follows from the VGPR budget of a SIMD.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from flyconfigs.errors import GPUError
from flyconfigs.schema.models import Resources

__all__ = ["LDS_BY_ARCH", "KernelMetadata", "kernel_metadata", "resources_from_metadata"]

NT_AMDGPU_METADATA = 32
SHT_NOTE = 7
# gfx90a/gfx942: 512 unified VGPRs (VGPR + AGPR) per lane per SIMD, allocated in blocks
# of 8, at most 8 waves per SIMD, 4 SIMDs and 64 KiB of LDS per CU.
VGPR_BUDGET = 512
VGPR_GRANULE = 8
MAX_WAVES_PER_SIMD = 8
SIMDS_PER_CU = 4
LDS_PER_CU = 64 * 1024
LDS_BY_ARCH = {"gfx950": 160 * 1024}
"""LDS per CU where it is not :data:`LDS_PER_CU` (gfx950: 160 KiB, AMD CDNA 4 ISA guide)."""


@dataclass(frozen=True)
class KernelMetadata:
    """The fields of one kernel's metadata that decide its resources."""

    name: str
    vgprs: int
    agprs: int
    sgprs: int
    vgpr_spills: int
    sgpr_spills: int
    lds_bytes: int
    scratch_bytes: int
    wavefront_size: int
    max_workgroup_size: int


def _notes(elf: bytes) -> list[tuple[str, int, bytes]]:
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise GPUError("not a little-endian ELF64 code object")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    notes = []
    for index in range(shnum):
        base = shoff + index * shentsize
        sh_type, = struct.unpack_from("<I", elf, base + 4)
        if sh_type != SHT_NOTE:
            continue
        offset, size = struct.unpack_from("<QQ", elf, base + 0x18)
        pos, end = offset, offset + size
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            pos += 12
            name = elf[pos : pos + namesz].rstrip(b"\0").decode("ascii", "replace")
            pos += (namesz + 3) & ~3
            desc = elf[pos : pos + descsz]
            pos += (descsz + 3) & ~3
            notes.append((name, ntype, desc))
    return notes


def kernel_metadata(code_object: bytes, kernel: str | None = None) -> KernelMetadata:
    """The metadata of ``kernel`` (its symbol or name; the only kernel when ``None``)."""
    import msgpack

    for owner, ntype, desc in _notes(code_object):
        if owner == "AMDGPU" and ntype == NT_AMDGPU_METADATA:
            meta: dict[str, Any] = msgpack.unpackb(desc, raw=False, strict_map_key=False)
            kernels = meta.get("amdhsa.kernels", [])
            for k in kernels:
                if kernel is None or kernel in (k.get(".name"), k.get(".symbol"), str(k.get(".symbol", "")).removesuffix(".kd")):
                    return KernelMetadata(
                        name=str(k.get(".name")),
                        vgprs=int(k.get(".vgpr_count", 0)),
                        agprs=int(k.get(".agpr_count", 0)),
                        sgprs=int(k.get(".sgpr_count", 0)),
                        vgpr_spills=int(k.get(".vgpr_spill_count", 0)),
                        sgpr_spills=int(k.get(".sgpr_spill_count", 0)),
                        lds_bytes=int(k.get(".group_segment_fixed_size", 0)),
                        scratch_bytes=int(k.get(".private_segment_fixed_size", 0)),
                        wavefront_size=int(k.get(".wavefront_size", 64)),
                        max_workgroup_size=int(k.get(".max_flat_workgroup_size", 1024)),
                    )
            raise GPUError(f"kernel {kernel!r} not in the code object's metadata ({[k.get('.name') for k in kernels]})")
    raise GPUError("the code object has no AMDGPU metadata note")


def resources_from_metadata(meta: KernelMetadata, block_threads: int, dynamic_lds: int = 0,
                            lds_per_cu: int = LDS_PER_CU) -> Resources:
    """Resources and occupancy of a launch of ``block_threads`` threads on a CU of
    ``lds_per_cu`` bytes of LDS."""
    unified = meta.vgprs + meta.agprs
    allocated = max(VGPR_GRANULE, -(-unified // VGPR_GRANULE) * VGPR_GRANULE)
    waves_by_vgpr = min(MAX_WAVES_PER_SIMD, VGPR_BUDGET // allocated)
    waves_per_block = -(-block_threads // meta.wavefront_size)
    blocks = (waves_by_vgpr * SIMDS_PER_CU) // max(1, waves_per_block)
    lds = meta.lds_bytes + dynamic_lds
    if lds:
        blocks = min(blocks, lds_per_cu // lds)
    waves = min(blocks * waves_per_block, MAX_WAVES_PER_SIMD * SIMDS_PER_CU)
    spills = meta.scratch_bytes + 4 * (meta.vgpr_spills + meta.sgpr_spills)
    return Resources(
        registers=unified,
        spill_bytes=spills if (meta.vgpr_spills or meta.sgpr_spills or meta.scratch_bytes) else 0,
        shared_bytes=lds,
        max_blocks_per_cu=blocks,
        occupancy=waves / (MAX_WAVES_PER_SIMD * SIMDS_PER_CU),
    )
