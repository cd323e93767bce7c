"""When an RMSNorm config is valid: the family's rules, stated once.

:data:`RULES` is the one statement of them.  The declaration's check evaluates every rule
over :func:`quantities` (computed from the config, the key and the device); the source
``rmsnorm.cu`` gets the asserted ones as ``static_assert``s over its own ``fc::``
quantities of the same names, put where it says ``// @rules`` by :func:`source_with_rules`.
A config the check accepts therefore passes every assertion of the source, and a rule
changed here changes both (and the source's digest, which covers the inserted text).

The quantities, as ``rmsnorm.cu`` defines them:

``N`` row length; ``XBYTES`` bytes of an activation; ``VEC_BYTES`` bytes per access (0:
scalar); ``VEC`` elements per access; ``NV`` accesses per row; ``TPR`` threads per row;
``ROWS`` rows per block; ``BLOCK`` threads per block; ``WAVE`` the wave width;
``CLUSTER`` blocks per row; ``SLICE`` accesses per block of a cluster; ``ITEMS``
accesses per thread; ``CACHE`` the cache-hint bits; ``MAX_CLUSTER`` the largest cluster
the target runs (8 on NVIDIA sm90 and later, else 1); ``HINTS_OK`` 1 where the target
takes cache hints (NVIDIA sm80 and later); ``MAX_BLOCK`` 1024.  The declaration alone
also reads ``STORAGE`` (0 registers, 1 shared memory, 2 re-read), ``VALUES`` (values a
thread holds), ``SHARED_BYTES`` (shared memory of a ``smem`` block), ``OCC`` (the
occupancy hint), ``REG_CAP`` (the registers a thread may use under it on NVIDIA, 255
without one), ``ROW_THREADS_CAP`` and the budgets ``MAX_REG_FLOATS`` and ``MAX_SMEM_BYTES``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from flyconfigs.kernels.rmsnorm.tunables import cluster_of, hints_of
from flyconfigs.kernels.rownorm import ELEMENT_BYTES, pow2_ceil
from flyconfigs.kernels.rules import Rule, Rules, static_asserts

__all__ = ["MARKER", "MAX_BLOCK", "MAX_REG_FLOATS", "MAX_SMEM_BYTES", "RULES", "quantities", "source_with_rules"]

MAX_REG_FLOATS = 64
MAX_SMEM_BYTES = 48 * 1024
MAX_BLOCK = 1024
STORAGE_IDS = {"reg": 0, "smem": 1, "reread": 2}
CACHE_BITS = {"none": 0, "stream": 7}
"""``FC_CACHE`` of each ``cache_hints`` value: 1 last read of x evict-first, 2 reread's
first read evict-last, 4 streaming stores."""
MARKER = "// @rules"

RULES = Rules((
    Rule("vector-holds-an-element", "VEC_BYTES == 0 or VEC_BYTES >= XBYTES", "vector narrower than one element"),
    Rule("vector-divides-row", "VEC_BYTES == 0 or N % VEC == 0",
         "a vector of {VEC} elements does not divide the row of {N}"),
    Rule("hints-need-sm80", "CACHE == 0 or HINTS_OK == 1", "cache_hints='stream' needs an NVIDIA sm80 or later device"),
    Rule("cluster-needs-sm90", "CLUSTER <= MAX_CLUSTER",
         "a cluster of {CLUSTER} blocks needs an NVIDIA sm90 or later device (at most {MAX_CLUSTER} here)"),
    Rule("cluster-has-slices", "CLUSTER <= NV", "a cluster of {CLUSTER} blocks for {NV} vectors leaves a block without a slice",
         asserted=False),
    Rule("cluster-within-row-lanes", "CLUSTER <= TPR",
         "a row's {TPR} lanes cannot store its partial sum into each of the {CLUSTER} blocks of its cluster"),
    Rule("block-size", "BLOCK <= MAX_BLOCK", "block of {BLOCK} threads exceeds {MAX_BLOCK}"),
    Rule("block-whole-waves", "TPR >= WAVE or BLOCK % WAVE == 0",
         "a block of {BLOCK} threads is not a whole number of {WAVE}-wide waves"),
    Rule("row-whole-waves", "TPR <= WAVE or TPR % WAVE == 0",
         "threads per row must be a sub-wave or a multiple of the wave size ({WAVE})"),
    Rule("register-budget", "STORAGE != 0 or VALUES <= MAX_REG_FLOATS",
         "{VALUES} values per thread exceed the register budget of {MAX_REG_FLOATS}", asserted=False),
    # On NVIDIA, __launch_bounds__(BLOCK, OCC) caps a thread at 65536 / (BLOCK * OCC)
    # registers, and a row held in registers past half that cap spills; at exactly half it
    # spills under a cap below 64 and for fp32 rows.  So say the committed sm90 tunings
    # (H200 and H100), which recorded the spills of every config they timed: all 5,380 timed
    # configs this refuses spilled, and 234 of the 29,744 with an occupancy bound it accepts
    # (NVRTC for sm90 agrees: 512 threads at occupancy 2 hold 32 values in 64 registers,
    # and spill 40 bytes at 40).  No committed winner breaks it.  On AMD the occupancy is
    # waves per EU, another budget.
    Rule("occupancy-register-cap",
         "WAVE != 32 or OCC == 0 or STORAGE != 0 or 2 * VALUES < REG_CAP "
         "or (2 * VALUES == REG_CAP and REG_CAP >= 64 and XBYTES < 4)",
         "{VALUES} values per thread in registers exceed half of the {REG_CAP} registers occupancy {OCC} "
         "leaves a thread: the kernel spills", asserted=False),
    # The compiler refuses a byte of shared memory more than this; rmsnorm.cu's shared arrays
    # are what SHARED_BYTES adds up.
    Rule("shared-memory", "STORAGE != 1 or SHARED_BYTES <= MAX_SMEM_BYTES",
         "{ROWS} rows of {HELD} floats and their partial sums ({SHARED_BYTES} bytes) exceed {MAX_SMEM_BYTES} bytes "
         "of shared memory", asserted=False),
    Rule("threads-have-vectors", "TPR <= ROW_THREADS_CAP", "more threads than vectors in the row", asserted=False),
))
"""Every rule a config must meet, in the order the check reports the first broken one.
``asserted`` rules are also ``static_assert``s of ``rmsnorm.cu``; the others are the
family's choice of what it runs (a budget or a pruning), not compile errors."""


def quantities(config: Mapping[str, Any], key: Mapping[str, Any], wave: int, max_cluster: int,
               cache_hints: bool) -> dict[str, int]:
    """The quantities :data:`RULES` read, for ``config`` at ``key`` on a device of wave size
    ``wave`` that runs clusters of up to ``max_cluster`` blocks and takes cache hints where
    ``cache_hints``; the source derives the same names from its ``-D`` options."""
    n = int(key["N"])
    xbytes = ELEMENT_BYTES[str(key["dtype"])]
    vbytes = int(config["vector_bytes"])
    threads, rows = int(config["threads"]), int(config["rows_per_block"])
    cluster = cluster_of(config)
    storage = STORAGE_IDS[str(config["row_storage"])]
    # As rmsnorm.cu: VEC = VEC_BYTES / XBYTES (at least 1 here, so that a vector narrower
    # than an element is refused by its rule instead of dividing by zero).
    vec = max(1, vbytes // xbytes) if vbytes else 1
    nv = -(-n // vec)
    slice_ = -(-nv // cluster)
    items = -(-slice_ // threads)
    waves_per_row = threads // wave if threads > wave else 1
    # The held rows (whole vectors), the reduction's per-wave partial sums and, in a
    # cluster, every block's partial and the 8-byte barrier counting them (with its
    # alignment), as rmsnorm.cu declares them.
    shared = 4 * rows * (slice_ * vec + waves_per_row + (cluster if cluster > 1 else 0)) + (16 if cluster > 1 else 0)
    occ = int(config.get("occupancy", 0))
    reg_cap = min(255, 65536 // (threads * rows * occ)) if occ > 0 else 255
    return {
        "N": n, "XBYTES": xbytes, "VEC_BYTES": vbytes, "VEC": vec, "NV": nv, "TPR": threads, "ROWS": rows,
        "BLOCK": threads * rows, "WAVE": wave, "CLUSTER": cluster, "SLICE": slice_, "ITEMS": items,
        "CACHE": CACHE_BITS.get(hints_of(config), 0),
        "MAX_CLUSTER": max_cluster, "HINTS_OK": int(cache_hints), "MAX_BLOCK": MAX_BLOCK,
        "STORAGE": storage, "VALUES": items * vec, "OCC": occ, "REG_CAP": reg_cap, "HELD": slice_ * vec, "SHARED_BYTES": shared,
        "ROW_THREADS_CAP": max(wave, pow2_ceil(slice_)),
        "MAX_REG_FLOATS": MAX_REG_FLOATS, "MAX_SMEM_BYTES": MAX_SMEM_BYTES,
    }


@functools.cache  # one string for every compile request of a run (the tuner holds them all)
def source_with_rules(text: str, where: str) -> str:
    """``text`` (the source read from ``where``) with the asserted rules in place of its one
    :data:`MARKER` line; ``ValueError`` naming ``where`` when it has none or several.  The
    same arguments give the same string object."""
    lines = text.split("\n")
    at = [i for i, line in enumerate(lines) if line.strip() == MARKER]
    if len(at) != 1:
        raise ValueError(f"{where}: expected one line {MARKER!r} where the rules go, found {len(at)}")
    indent = lines[at[0]][: len(lines[at[0]]) - len(lines[at[0]].lstrip())]
    generated = static_asserts(RULES, indent).rstrip("\n")
    return "\n".join([*lines[: at[0]], generated, *lines[at[0] + 1:]])
