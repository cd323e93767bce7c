"""RMSNorm's cost model: a prediction of each compiled config's time per call from the
device descriptor, the key and the compiled resources alone — never from a timing.

Fitted on nothing: every constant is a property of the hardware class or of the kernel's
structure, written here once, and the device's own figures (compute units, wave size,
peak bandwidth) come from its descriptor.  The parts:

* traffic: ``2·M·N`` elements of ``x`` and ``y`` plus the weight; a ``reread`` config
  reads ``x`` a second time, from L2 when the block's rows fit in it;
* bandwidth: the bytes a CU keeps in flight (resident threads × vectors each thread
  issues before it must wait) against what the device needs to cover its memory latency
  (Little's law: peak bandwidth × latency / CUs), capped at the peak; the scalar path
  (vector width 0) loses a fixed share to issue;
* overlap: while a block reduces and synchronises it has nothing in flight; the other
  blocks resident on its CU hide that time only as far as there are any;
* launch waves: blocks over ``CUs × resident blocks per CU`` (from the code object's
  occupancy), the last wave counted whole;
* the per-row chain that bounds small ``M``: one memory latency for the loads, the
  vectors a thread issues one after another, the reduction's shuffle steps and, when a
  row spans several waves, a barrier and a second stage, then the store.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flyconfigs.kernels.rmsnorm import ELEMENT_BYTES
from flyconfigs.schema.models import Device, Resources

__all__ = ["MODEL", "RMSNormCostModel"]

MEMORY_LATENCY_US = 0.7
"""Round trip of a load that misses every cache, on HBM GPUs of this class."""
LAUNCH_US = 2.0
"""A kernel launch's fixed cost in a graph: the same for every config."""
VECTOR_ISSUE_US = 0.004
"""Issuing one more dependent-free vector load from one thread."""
SHUFFLE_US = 0.01
"""One step of a wave-wide reduction."""
BARRIER_US = 0.15
"""A block barrier plus the second stage of a cross-wave reduction."""
STORE_US = 0.3
"""Writing the row back (stores retire without waiting for memory)."""
SCALAR_EFFICIENCY = 0.6
"""Share of the vector path's bandwidth the scalar path reaches (issue-bound)."""
REREAD_LOADS_IN_FLIGHT = 4
"""Vectors per thread in flight in a ``reread`` pass (it accumulates as it goes)."""


@dataclass(frozen=True)
class RMSNormCostModel:
    """Predicted µs per call; ``name`` and ``version`` go into each predicted artifact."""

    name: str = "rmsnorm-roofline"
    version: int = 1

    def block_threads(self, config: Mapping[str, Any]) -> int:
        """Threads per block of ``config`` (what occupancy is computed for)."""
        return int(config["threads"]) * int(config["rows_per_block"])

    def predict_us(self, config: Mapping[str, Any], key: Mapping[str, Any], device: Device,
                   resources: Resources) -> float:
        """Microseconds one call of ``config`` takes at ``key`` on ``device``."""
        m, n = int(key["M"]), int(key["N"])
        esize = ELEMENT_BYTES[str(key["dtype"])]
        wsize = ELEMENT_BYTES[str(key["weight_dtype"])]
        threads, rows = int(config["threads"]), int(config["rows_per_block"])
        vbytes, storage = int(config["vector_bytes"]), str(config["row_storage"])
        wave = device.wave_size
        cus = device.compute_units
        peak = (device.memory_bandwidth_gbps or 2000.0) * 1e3  # bytes per µs
        l2 = device.l2_bytes or (4 << 20)

        vec_bytes = vbytes or esize
        vec = max(1, vec_bytes // esize)
        per_thread = -(-n // (threads * vec))
        blocks = -(-m // rows)
        per_cu = max(1, resources.max_blocks_per_cu or 1)
        resident = min(blocks, cus * per_cu)

        traffic = float(2 * m * n * esize + n * wsize)
        if storage == "reread":
            rows_in_flight = resident * rows * n * esize
            traffic += m * n * esize * (0.15 if rows_in_flight <= l2 else 1.0)

        in_flight_vectors = min(per_thread, REREAD_LOADS_IN_FLIGHT) if storage == "reread" else per_thread
        in_flight_per_cu = (resident / cus) * threads * rows * in_flight_vectors * vec_bytes
        needed_per_cu = peak * MEMORY_LATENCY_US / cus
        bandwidth = peak * min(1.0, in_flight_per_cu / needed_per_cu)
        if not vbytes:
            bandwidth *= SCALAR_EFFICIENCY
        # A block idles the memory system while it reduces and synchronises; the other
        # blocks resident on its CU cover that time only as far as there are any.
        resident_per_cu = max(1.0, resident / cus)
        block_bytes = rows * 2 * n * esize
        load_us = block_bytes * resident_per_cu / (bandwidth / cus)
        sync_us = MEMORY_LATENCY_US + math.log2(max(2, min(threads, wave))) * SHUFFLE_US
        if threads > wave:
            sync_us += BARRIER_US
        bandwidth *= load_us / (load_us + sync_us / resident_per_cu)
        waves_exact = blocks / (cus * per_cu)
        waves = math.ceil(waves_exact)
        stream_us = traffic / bandwidth * (waves / waves_exact if waves_exact > 0 else 1.0)

        steps = math.log2(max(2, min(threads, wave)))
        chain = MEMORY_LATENCY_US + per_thread * VECTOR_ISSUE_US + steps * SHUFFLE_US + STORE_US
        if threads > wave:
            chain += BARRIER_US
        if storage == "reread":
            chain += MEMORY_LATENCY_US * 0.5 + per_thread * VECTOR_ISSUE_US
        chain_us = waves * chain
        return LAUNCH_US + max(stream_us, chain_us)


MODEL = RMSNormCostModel()
