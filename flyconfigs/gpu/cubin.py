"""Reading an NVIDIA cubin without a GPU: a kernel's registers, local (spill) bytes and
static shared memory from the ELF's sections, and the blocks a streaming multiprocessor
holds at once by the CUDA occupancy rules, for the arches whose limits are listed here.

What ``flyconfigs predict`` needs of an NVIDIA GPU that is not here: NVRTC compiles for
any arch on a CPU, and the cubin records what the driver would report.

* ``.nv.info`` holds, per kernel symbol, ``EIATTR_REGCOUNT`` (registers per thread) and
  ``EIATTR_FRAME_SIZE`` (local memory per thread: what spills or a stack array take);
* ``.nv.shared.<kernel>`` is the kernel's static shared memory; on sm90 and sm100 its size
  includes the 1 KiB the system reserves per block (``cudaDevAttrReservedSharedMemoryPerBlock``),
  on sm80 it does not.  The driver reports the kernel's own part
  (``CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES``).

The occupancy rules are the CUDA occupancy calculator's: registers are allocated per warp
in units of 256, each of the SM's four partitions holds a quarter of the register file,
shared memory is allocated in units of 128 bytes plus the reserved KiB per block, and an
SM holds at most 64 warps and 32 blocks.  ``tests/test_cubin.py`` checks them against the
driver's answers that the sm90 tunings recorded.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from flyconfigs.errors import GPUError
from flyconfigs.schema.models import Resources

__all__ = ["LIMITS", "SMLimits", "kernel_usage", "max_blocks_per_sm", "resources_from_cubin"]

EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F
EIFMT_SVAL = 4
EIFMT_HVAL = 3
EIFMT_BVAL = 2
EIFMT_NVAL = 1


@dataclass(frozen=True)
class SMLimits:
    """What one streaming multiprocessor of an arch holds (CUDA C++ Programming Guide,
    "Technical Specifications per Compute Capability")."""

    shared_bytes: int
    """Shared memory per SM at the largest carve-out."""
    reserved_shared_per_block: int = 1024
    registers: int = 65536
    max_warps: int = 64
    max_blocks: int = 32
    register_unit: int = 256
    shared_unit: int = 128
    partitions: int = 4
    section_holds_reserved: bool = True
    """Whether a kernel's ``.nv.shared`` section counts the reserved KiB."""


LIMITS = {
    "sm80": SMLimits(shared_bytes=167936, section_holds_reserved=False),  # 8.0: 164 KiB shared per SM
    "sm90": SMLimits(shared_bytes=233472),  # 9.0: 228 KiB
    "sm100": SMLimits(shared_bytes=233472),  # 10.0: 228 KiB
}
"""Per arch; an arch not listed has no occupancy computed here (the driver's is used)."""


def _sections(elf: bytes) -> dict[str, tuple[int, int, int]]:
    """Each section's name with its (type, offset, size)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        raise GPUError("not a 64-bit ELF cubin")
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    entsize, count, names = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * entsize) for i in range(count)]
    table = headers[names][4]
    out = {}
    for h in headers:
        start = table + h[0]
        out[elf[start:elf.index(b"\0", start)].decode()] = (h[1], h[4], h[5])
    return out


def _symbol_index(elf: bytes, sections: dict[str, tuple[int, int, int]], name: str) -> int:
    _, offset, size = sections[".symtab"]
    _, str_offset, _ = sections[".strtab"]
    for i in range(size // 24):
        name_at = struct.unpack_from("<I", elf, offset + i * 24)[0]
        start = str_offset + name_at
        if elf[start:elf.index(b"\0", start)].decode() == name:
            return i
    raise GPUError(f"kernel {name!r} is not a symbol of the cubin")


def kernel_usage(cubin: bytes, name: str) -> tuple[int, int, int]:
    """``name``'s registers per thread, local bytes per thread and the size of its
    static shared section (with the system's reserved KiB, when it has one) in ``cubin``.  Raises :class:`GPUError` when the
    cubin does not describe it."""
    sections = _sections(cubin)
    symbol = _symbol_index(cubin, sections, name)
    if ".nv.info" not in sections:
        raise GPUError("the cubin has no .nv.info section")
    _, offset, size = sections[".nv.info"]
    data = cubin[offset:offset + size]
    found: dict[int, int] = {}
    at = 0
    while at + 2 <= len(data):
        fmt, attr = data[at], data[at + 1]
        if fmt == EIFMT_SVAL:
            length = struct.unpack_from("<H", data, at + 2)[0]
            if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and length == 8:
                owner, value = struct.unpack_from("<II", data, at + 4)
                if owner == symbol:
                    found[attr] = value
            at += 4 + length
        elif fmt in (EIFMT_HVAL, EIFMT_BVAL):
            at += 4
        else:
            at += 2
    if EIATTR_REGCOUNT not in found:
        raise GPUError(f"the cubin's .nv.info gives no register count for {name!r}")
    shared = sections.get(f".nv.shared.{name}", (0, 0, 0))[2]
    return found[EIATTR_REGCOUNT], found.get(EIATTR_FRAME_SIZE, 0), shared


def max_blocks_per_sm(limits: SMLimits, registers: int, shared_bytes: int, block_threads: int) -> int:
    """Blocks of ``block_threads`` threads one SM holds at once (0 when none fits)."""
    warps = -(-block_threads // 32)
    per_warp = -(-registers * 32 // limits.register_unit) * limits.register_unit
    by_registers = ((limits.registers // limits.partitions) // per_warp) * limits.partitions if per_warp else limits.max_warps
    shared = -(-(shared_bytes + limits.reserved_shared_per_block) // limits.shared_unit) * limits.shared_unit
    return min(by_registers // warps, limits.max_warps // warps, limits.shared_bytes // shared, limits.max_blocks)


def resources_from_cubin(cubin: bytes, name: str, arch: str, block_threads: int) -> Resources:
    """``name``'s resources in ``cubin`` and its occupancy on ``arch`` at ``block_threads``.
    Raises :class:`GPUError` for an arch :data:`LIMITS` does not list."""
    limits = LIMITS.get(arch)
    if limits is None:
        raise GPUError(f"no occupancy limits for {arch} (known: {', '.join(LIMITS)})")
    registers, local, section = kernel_usage(cubin, name)
    held = limits.reserved_shared_per_block if limits.section_holds_reserved else 0
    shared = max(0, section - held) if section else 0
    blocks = max_blocks_per_sm(limits, registers, shared, block_threads)
    return Resources(registers=registers, spill_bytes=local, shared_bytes=shared, max_blocks_per_cu=blocks,
                     occupancy=min(1.0, blocks * block_threads / (limits.max_warps * 32)))
