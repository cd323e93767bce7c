"""RMSNorm's cost model: a ranking of compiled configs by predicted time per call from
the device descriptor, the key and the compiled resources alone — never from a timing of
the device it predicts for.

Two layers.  :class:`RooflineModel` is a physical estimate fitted on nothing: every
constant is a property of the hardware class or of the kernel's structure, and the
device's own figures (compute units, wave size, peak bandwidth) come from its
descriptor.  :class:`RMSNormCostModel` ranks with a ridge regression over
:func:`features` (the roofline estimate among them), fitted by
:mod:`flyconfigs.kernels.rmsnorm.fit_model` on measured tunings of other keys.  The roofline's parts:

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

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files as resources_files
from typing import Any

from flyconfigs.kernels.rmsnorm.tunables import cluster_of
from flyconfigs.kernels.rownorm import ELEMENT_BYTES
from flyconfigs.schema.models import Device, Resources

__all__ = ["MODEL", "ROOFLINE", "RMSNormCostModel", "RooflineModel", "features"]

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
class RooflineModel:
    """The physical estimate of one config's µs per call (a feature of the ranking model)."""

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
        # A cluster's blocks each take a slice of the row: as many blocks as slices, each
        # of a slice's length, and two cluster barriers on the chain.
        cluster = cluster_of(config)
        full_n, n = n, -(-n // cluster)
        wave = device.wave_size
        cus = device.compute_units
        peak = (device.memory_bandwidth_gbps or 2000.0) * 1e3  # bytes per µs
        l2 = device.l2_bytes or (4 << 20)

        vec_bytes = vbytes or esize
        vec = max(1, vec_bytes // esize)
        per_thread = -(-n // (threads * vec))
        blocks = -(-m // rows) * cluster
        per_cu = max(1, resources.max_blocks_per_cu or 1)
        resident = min(blocks, cus * per_cu)

        traffic = float(2 * m * full_n * esize + full_n * wsize)
        if storage == "reread":
            rows_in_flight = resident * rows * n * esize
            traffic += m * full_n * esize * (0.15 if rows_in_flight <= l2 else 1.0)

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
        # A partial last wave costs a whole one; a single partial wave is already priced
        # by the bytes its few resident blocks keep in flight.
        stream_us = traffic / bandwidth * (waves / waves_exact if waves_exact > 1 else 1.0)

        steps = math.log2(max(2, min(threads, wave)))
        chain = MEMORY_LATENCY_US + per_thread * VECTOR_ISSUE_US + steps * SHUFFLE_US + STORE_US
        if threads > wave:
            chain += BARRIER_US
        if cluster > 1:
            chain += 2 * BARRIER_US
        if storage == "reread":
            chain += MEMORY_LATENCY_US * 0.5 + per_thread * VECTOR_ISSUE_US
        chain_us = waves * chain
        return LAUNCH_US + max(stream_us, chain_us)


ROOFLINE = RooflineModel()


def features(config: Mapping[str, Any], key: Mapping[str, Any], device: Device, resources: Resources) -> list[float]:
    """What the ranking model sees of one compiled config: its shape (values per thread
    of the block's slice of the row, the whole row without a cluster,
    threads, a row spanning several waves, rows per block, vector width, row storage,
    the occupancy hint), its compiled resources (resident blocks per CU, occupancy,
    registers), the launch waves on ``device``, and the roofline estimate — each also
    scaled by ``log2 M`` and ``log2 N``, so that its weight can change with the key."""
    m, n = int(key["M"]), int(key["N"])
    esize = ELEMENT_BYTES[str(key["dtype"])]
    threads, rows = int(config["threads"]), int(config["rows_per_block"])
    vbytes, storage, occupancy = int(config["vector_bytes"]), str(config["row_storage"]), int(config["occupancy"])
    vec = max(1, (vbytes or esize) // esize)
    cluster = cluster_of(config)
    slice_n = -(-n // cluster)
    per_thread = -(-slice_n // (threads * vec))
    per_cu = max(1, resources.max_blocks_per_cu or 1)
    waves_exact = -(-m // rows) * cluster / (device.compute_units * per_cu)
    base = [
        math.log2(per_thread), math.log2(threads), float(threads > device.wave_size), math.log2(rows),
        float(vbytes == 0), float(vbytes == 4), float(vbytes == 8), float(storage == "smem"),
        float(storage == "reread"), float(occupancy == 2), math.log2(per_cu), resources.occupancy or 0.0,
        (resources.registers or 0) / 256, math.log2(max(waves_exact, 1e-3)), math.ceil(waves_exact) / waves_exact,
        math.log(ROOFLINE.predict_us(config, key, device, resources)),
    ]
    scale_m, scale_n = math.log2(m) / 16, math.log2(n) / 16
    return [1.0, *base, *(scale_m * f for f in base), *(scale_n * f for f in base)]


@dataclass(frozen=True)
class RMSNormCostModel:
    """Ranks compiled configs of one key: a ridge regression over :func:`features` of the
    log slowdown against the key's best, its weights fitted by
    :mod:`flyconfigs.kernels.rmsnorm.fit_model` on measured tunings and shipped as
    ``model.json`` (with the data and the cross-validation they came from).
    Version 1 was fitted before the ``cluster`` tunable existed: it prices a cluster
    only through the geometry of :func:`features` and the roofline (a slice per block,
    two cluster barriers)."""

    name: str = "rmsnorm-ridge"

    @property
    def version(self) -> int:
        """The fitted weights' version (a refit is a new version)."""
        return int(_weights()["version"])

    def block_threads(self, config: Mapping[str, Any]) -> int:
        """Threads per block of ``config`` (what occupancy is computed for)."""
        return ROOFLINE.block_threads(config)

    def predict(self, configs: Sequence[Mapping[str, Any]], key: Mapping[str, Any], device: Device,
                resources: Sequence[Resources]) -> list[float]:
        """Predicted µs per call of each config: the key's best roofline estimate times
        each config's predicted slowdown against the best of them."""
        weights = _weights()["weights"]
        scores = [sum(w * f for w, f in zip(weights, features(c, key, device, r), strict=True))
                  for c, r in zip(configs, resources, strict=True)]
        floor = min(ROOFLINE.predict_us(c, key, device, r) for c, r in zip(configs, resources, strict=True))
        low = min(scores)
        return [floor * math.exp(s - low) for s in scores]


@functools.cache
def _weights() -> dict[str, Any]:
    text = resources_files("flyconfigs.kernels.rmsnorm").joinpath("model.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


MODEL = RMSNormCostModel()
