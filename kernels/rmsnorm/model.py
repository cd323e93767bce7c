"""RMSNorm's cost model: a ranking of compiled configs by predicted time per call from
the device descriptor, the key and the compiled resources alone — never from a timing of
the device it predicts for.

Two layers.  :class:`RooflineModel` is a physical estimate fitted on nothing: every
constant is a property of the hardware class or of the kernel's structure, and the
device's own figures (compute units, wave size, L2, peak bandwidth) come from its
descriptor (the product catalog's, for a device that was never measured).
:class:`RMSNormCostModel` ranks by the slowdowns each config's shape (the learned
default's :func:`~flyconfigs.kernels.rmsnorm.default.shape_of`: vectors per thread, rows
per block, vector width, row storage, occupancy hint, cluster, cache hints) had at the
nearest measured keys of a reference device, weighted by distance
(:func:`neighbour_scores`), plus the roofline's log estimate at a weight the fit chooses.  The roofline's parts:

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files as resources_files
from typing import Any

from flyconfigs.kernels.rmsnorm.default import DefaultTable, Shape, decode, shape_of
from flyconfigs.kernels.rmsnorm.tunables import cluster_of
from flyconfigs.kernels.rownorm import ELEMENT_BYTES
from flyconfigs.schema.models import Artifact, Device, Resources

__all__ = ["MISSING", "MODEL", "ROOFLINE", "OWN_WEIGHT", "SIGMA", "RMSNormCostModel", "RooflineModel", "neighbour_scores"]

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


MISSING = 0.2
"""The log slowdown charged to a shape a neighbouring key does not list (about 1.4×)."""
SIGMA = 0.3
"""Width, in ``log2`` of M and N, of the Gaussian that weighs neighbouring keys: the key
itself counts fully, a key twice as long or as tall about 0.4%, so a measured key is
served its own ranking and a key never measured the average of the nearest."""


OWN_WEIGHT = 4.0
"""How much more a refit's own measured key weighs than the reference's key at the same
distance: at a key the device measured, its own ranking decides; at a key next to it, the
reference's own measurement of that key still counts.  On the H100's tunings treated as
unmeasured, a refit on two of its row lengths (weight 4) served 55 of those 56 keys within
3% of their winners (49 before) and 73 of the 81 keys of the row lengths beside them (71
before; geometric mean +0.2%); weight 2 served 53, weight 10 served 56 but moved the others
by +0.5%."""


def neighbour_scores(tables: Sequence[tuple[DefaultTable, float]], key: Mapping[str, Any],
                     compute_units: int) -> Callable[[Shape], float]:
    """The predicted log slowdown of each shape at ``key`` on a device of
    ``compute_units``: the weighted mean over the keys of ``tables`` (each with its
    share) of the same dtypes (else bf16's) of each one's log slowdown of the shape
    (:data:`MISSING` where it is not listed), a key's weight a Gaussian (:data:`SIGMA`)
    of its distance in ``log2`` M and N times its table's share.  Row counts are scaled
    by each table's compute units over the device's (a device twice as wide reads the
    keys of half the rows)."""
    n, dtype, weight = int(key["N"]), str(key["dtype"]), str(key["weight_dtype"])
    logits: list[tuple[float, Mapping[Shape, float]]] = []
    for table, share in tables:
        m = int(key["M"]) * table.compute_units / max(1, compute_units)
        cells = [(k, c) for k, c in table.cells.items() if k[:2] == (dtype, weight)] or \
                [(k, c) for k, c in table.cells.items() if k[:2] == ("bf16", "bf16")]
        lm, ln = math.log2(max(m, 1.0)), math.log2(n)
        logits += [(math.log(share) - ((math.log2(k[2]) - lm) ** 2 + (math.log2(k[3]) - ln) ** 2) / (2 * SIGMA * SIGMA),
                    c) for k, c in cells]
    if not logits:
        return lambda shape: MISSING
    top = max(g for g, _ in logits)
    weighted = [(math.exp(g - top), c) for g, c in logits if g - top > -7.0]
    total = sum(w for w, _ in weighted)

    def score(shape: Shape) -> float:
        return sum(w * min(c.get(shape, MISSING), MISSING) for w, c in weighted) / total

    return score


@dataclass(frozen=True)
class RMSNormCostModel:
    """Ranks compiled configs of one key by their measured slowdowns at the nearest
    measured keys of a reference device (:func:`neighbour_scores` over the table that
    :mod:`flyconfigs.kernels.rmsnorm.fit_model` fits on measured tunings and ships as
    ``model.json``, with the data and the cross-validation it came from), plus the
    roofline's log estimate (:attr:`roofline_weight`).  What it reads of the device it predicts for is the descriptor:
    compute units scale the row count; the roofline reads the compute units, wave size,
    L2 and bandwidth, and the compiled resources.

    A refit (:meth:`refit`) adds the device's own measured keys, which weigh
    :data:`OWN_WEIGHT` times the reference's.

    Version 1 (``rmsnorm-ridge``, :mod:`flyconfigs.kernels.rmsnorm.ridge`) was a ridge
    regression over the config's features; version 2 replaced it when the cross-device
    check (``bench/cross_device.py``) found it further from the other card's winners than
    the table (docs/benchmarks.md)."""

    document: Mapping[str, Any] | None = None
    """The fitted model; the shipped ``model.json`` when ``None``."""

    @property
    def _doc(self) -> Mapping[str, Any]:
        return self.document if self.document is not None else _shipped()

    @property
    def name(self) -> str:
        """The model's name as predicted artifacts record it (``…-refit`` after a refit)."""
        return str(self._doc["model"])

    @property
    def version(self) -> int:
        """The fitted table's version (a refit keeps its reference's)."""
        return int(self._doc["version"])

    @property
    def roofline_weight(self) -> float:
        """Weight of the roofline's log estimate beside the table's score, chosen by the fit's
        cross-validation: it orders the shapes the neighbours did not list (a GPU whose
        space holds shapes the reference's did not, a key beyond the measured ones) and
        leans, where the table is unsure, toward what the device's figures favour."""
        return float(self._doc["roofline_weight"])

    @functools.cached_property
    def tables(self) -> list[tuple[DefaultTable, float]]:
        """The reference device's measured slowdowns by key and shape, and a refit's own."""
        out = [(_shipped_table() if self.document is None else decode(self._doc["table"]), 1.0)]
        if "refit" in self._doc:
            out.append((decode(self._doc["refit"]["table"]), OWN_WEIGHT))
        return out

    def refit(self, artifacts: Sequence[Artifact], files: Sequence[str] = ()) -> RMSNormCostModel:
        """This model with ``artifacts`` (measured RMSNorm tunings of the device it will
        predict for) added as the device's own keys.  Raises
        :class:`~flyconfigs.errors.FitError` when none of them can be used."""
        from flyconfigs.kernels.rmsnorm.fit_model import refit_document

        return RMSNormCostModel(refit_document(self._doc, artifacts, files))

    def block_threads(self, config: Mapping[str, Any]) -> int:
        """Threads per block of ``config`` (what occupancy is computed for)."""
        return ROOFLINE.block_threads(config)

    def prescores(self, configs: Sequence[Mapping[str, Any]], key: Mapping[str, Any], device: Device,
                  tables: Sequence[tuple[DefaultTable, float]] | None = None) -> list[float]:
        """Each config's predicted log slowdown from its shape alone, before it is compiled
        (what ``flyconfigs predict --shortlist`` ranks by)."""
        score = neighbour_scores(tables or self.tables, key, device.compute_units)
        n, dtype = int(key["N"]), str(key["dtype"])
        return [score(shape_of(c, n, dtype)) for c in configs]

    def scores(self, configs: Sequence[Mapping[str, Any]], key: Mapping[str, Any], device: Device,
               resources: Sequence[Resources], tables: Sequence[tuple[DefaultTable, float]] | None = None
               ) -> list[float]:
        """Each config's predicted log slowdown against the key's best (lower is faster)."""
        roofline = [math.log(ROOFLINE.predict_us(c, key, device, r)) for c, r in zip(configs, resources, strict=True)]
        weight = self.roofline_weight
        return [s + weight * r for s, r in zip(self.prescores(configs, key, device, tables), roofline, strict=True)]

    def predict(self, configs: Sequence[Mapping[str, Any]], key: Mapping[str, Any], device: Device,
                resources: Sequence[Resources]) -> list[float]:
        """Predicted µs per call of each config: the key's best roofline estimate times
        each config's predicted slowdown against the best of them."""
        scores = self.scores(configs, key, device, resources)
        floor = min(ROOFLINE.predict_us(c, key, device, r) for c, r in zip(configs, resources, strict=True))
        low = min(scores)
        return [floor * math.exp(s - low) for s in scores]


@functools.cache
def _shipped() -> dict[str, Any]:
    text = resources_files("flyconfigs.kernels.rmsnorm").joinpath("model.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@functools.cache
def _shipped_table() -> DefaultTable:
    return decode(_shipped()["table"])


MODEL = RMSNormCostModel()
