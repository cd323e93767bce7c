"""RMSNorm's learned default: what a key with no tuned config is served, on any device.

The table (``default.json``, written by :mod:`flyconfigs.kernels.rmsnorm.fit_default`) holds,
for each tuned key of one reference device, the few configs that came closest to that
key's best, each as a *shape* relative to the key and its slowdown against the best::

    (vectors per thread as a power of two, rows per block, vector bytes, row storage,
     occupancy, cluster, cache hints)

A shape becomes a config for any row length: the vector width gives the vectors in a
row, the cluster the slice of them one block takes, and the threads are that count
(rounded up to a power of two) divided by the vectors per thread.  For a key,
:func:`choose` scores every shape by the slowdowns it had at the tuned row lengths nearest
the asked one (two on each side, weighted by how close they are in log N, a shape missing
from a cell counted as :data:`MISSING`) at the asked row count where it was tuned, else at
the tuned row counts on either side of it (weighted by how close they are in log M), and
serves the best-scoring shape that is a valid config of the key's space; carried to a row length it
was not measured at, a shape of several rows per block has its block filled to
:data:`MULTI_ROW_BLOCK` threads.  Row counts are scaled by the device's compute units against the reference
device's, so that a device twice as wide reads the row of half the rows.

Imports nothing beyond the standard library, the row-norm helpers and the RMSNorm
declaration (neither imports torch or a GPU runtime): it runs on the serving path.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files as resources_files
from typing import Any

from flyconfigs.kernels.rmsnorm.tunables import cluster_of, hints_of
from flyconfigs.kernels.rownorm import ELEMENT_BYTES, pow2_ceil

__all__ = ["MISSING", "MULTI_ROW_BLOCK", "NEIGHBOURS", "SOFTEN", "DefaultTable", "Shape", "choose", "config_of", "shape_of", "table"]

Shape = tuple[int, int, int, str, int, int, str]
"""``(log2 vectors per thread, rows per block, vector bytes, row storage, occupancy, cluster,
cache hints)``."""

MISSING = 0.35
"""The log slowdown charged to a shape a cell does not list (about 1.4×, worse than any
shape a cell keeps)."""
NEIGHBOURS = 2
"""Tuned row lengths used on each side of the asked one."""
SOFTEN = 0.05
"""Added to a neighbour's log distance before it is inverted into a weight, so that a
neighbour very near the asked value weighs much, but finitely, more than one further off."""
MULTI_ROW_BLOCK = 128
"""Fewest threads a block of several rows is given where a shape is carried to a row
length it was not measured at (its rows are doubled).

A shape keeps its rows per block while its threads follow the row length, so a shape
taken from a multi-row config at a longer row stands, at a short one, for a block of a
wave or less (with every key of N = 128 hidden, the H100's 32768x128 bf16 was served 16
threads x 2 rows, one wave, against a winner of 8 threads x 16 rows).  Rows per block exist
to fill a block: 154 of the 164 tuned multi-row winners of both Hopper cards have blocks
(threads x rows) of at least 128 threads.  The leave-one-out figures are in
docs/benchmarks.md ("The learned default, refitted")."""

def _span(n: int, vbytes: int, dtype: str, cluster: int) -> int:
    """The vectors of ``vbytes`` (0: scalar) in one block's slice of a row of ``n``
    elements shared by ``cluster`` blocks, up to a power of two."""
    esize = ELEMENT_BYTES[dtype]
    vectors = -(-n // max(1, (vbytes or esize) // esize))
    return pow2_ceil(-(-vectors // cluster))


def shape_of(config: Mapping[str, Any], n: int, dtype: str) -> Shape:
    """``config`` for row length ``n`` of ``dtype`` as a shape (see the module docstring)."""
    vbytes, cluster = int(config["vector_bytes"]), cluster_of(config)
    shift = _span(n, vbytes, dtype, cluster).bit_length() - int(config["threads"]).bit_length()
    return (shift, int(config["rows_per_block"]), vbytes, str(config["row_storage"]), int(config["occupancy"]), cluster,
            hints_of(config))


def config_of(shape: Shape, n: int, dtype: str, block: int = 0) -> dict[str, int | str] | None:
    """The config ``shape`` stands for at row length ``n`` of ``dtype`` (the config it was
    taken from, at its own row length); ``None`` when its vector is narrower than an
    element.  With ``block``, a shape of several rows per block gets its rows doubled until
    the block holds that many threads."""
    shift, rows, vbytes, storage, occupancy, cluster, *rest = shape
    hints = str(rest[0]) if rest else "none"
    if vbytes and vbytes < ELEMENT_BYTES[dtype]:
        return None
    span = _span(n, vbytes, dtype, cluster)
    threads = span >> shift if shift >= 0 else span << -shift
    if threads < 1:
        return None
    while rows > 1 and threads * rows < block:
        rows *= 2
    return {"threads": threads, "rows_per_block": rows, "vector_bytes": vbytes, "row_storage": storage,
            "occupancy": occupancy, "cluster": cluster, "cache_hints": hints}


@dataclass(frozen=True)
class DefaultTable:
    """Cells ``(dtype, weight_dtype, M, N) -> {shape: log slowdown}`` measured on a
    device of ``compute_units``."""

    compute_units: int
    cells: Mapping[tuple[str, str, int, int], Mapping[Shape, float]]

    @functools.cached_property
    def _lengths(self) -> dict[tuple[str, str, int], tuple[int, ...]]:
        lengths: dict[tuple[str, str, int], set[int]] = {}
        for dtype, weight, m, n in self.cells:
            lengths.setdefault((dtype, weight, m), set()).add(n)
        return {k: tuple(sorted(v)) for k, v in lengths.items()}

    def _rows(self, dtype: str, weight: str) -> tuple[int, ...]:
        return tuple(sorted({m for d, w, m in self._lengths if (d, w) == (dtype, weight)}))

    def columns(self, dtype: str, weight: str, m: float) -> list[tuple[float, tuple[str, str, int]]]:
        """The tuned ``(dtype, weight, M)`` columns to read for ``m`` rows (reference-device
        rows), each with its weight: ``m``'s own where it was tuned, else the nearest tuned
        M below it and the nearest above (those there are), weighted by how close each is
        in log2; of the same dtypes, else of bf16 activations and weights, which the table
        always covers best.  Empty when the table has neither."""
        at = math.log2(max(m, 1.0))
        for d, w in ((dtype, weight), ("bf16", "bf16")):
            rows = self._rows(d, w)
            if not rows:
                continue
            same = [r for r in rows if abs(math.log2(r) - at) < 1e-9]
            if same:
                return [(1.0, (d, w, same[0]))]
            sides = [r for r in (max((r for r in rows if r < m), default=None),
                                 min((r for r in rows if r > m), default=None)) if r is not None]
            return [(1.0 / (abs(math.log2(r) - at) + SOFTEN), (d, w, r)) for r in sides]
        return []

    def measured(self, columns: Sequence[tuple[float, tuple[str, str, int]]], n: int) -> bool:
        """Whether every one of ``columns`` holds a cell of row length ``n`` (a shape read
        there is read as it was measured)."""
        return bool(columns) and all(n in self._lengths.get(column, ()) for _, column in columns)

    def scores(self, columns: Sequence[tuple[float, tuple[str, str, int]]], n: int) -> list[tuple[float, Shape]]:
        """Every shape listed near ``n`` in ``columns`` with its weighted slowdown, best
        first: each column's cells of the row lengths nearest ``n`` (``n``'s own where
        tuned), weighted by the column's weight times how close each is in log N."""
        cells: list[tuple[float, Mapping[Shape, float]]] = []
        for weight, column in columns:
            lengths = self._lengths.get(column, ())
            near = [x for x in lengths if x < n][-NEIGHBOURS:] + [x for x in lengths if x >= n][:NEIGHBOURS]
            if n in lengths:
                near = [n]
            cells += [(weight / (abs(math.log(x / n)) + SOFTEN), self.cells[(*column, x)]) for x in near]
        shapes = {s for _, cell in cells for s in cell}
        scored = [(sum(w * cell.get(s, MISSING) for w, cell in cells), s) for s in shapes]
        return sorted(scored)


def choose(table: DefaultTable, key: Mapping[str, Any], compute_units: int | None,
           candidates: Iterable[Mapping[str, Any]]) -> dict[str, int | str] | None:
    """The config the table serves for ``key``: the best-scoring shape that is one of
    ``candidates`` (the key's space on the device), or ``None`` when no listed shape is.
    Where a column read (:meth:`DefaultTable.columns`) did not measure the asked row
    length, a multi-row shape is tried with its block filled to :data:`MULTI_ROW_BLOCK`
    threads, then with half as many rows each time down to its own (a key of few rows caps
    the rows per block); where every one did, as it was measured."""
    m, n = int(key["M"]), int(key["N"])
    dtype, weight = str(key["dtype"]), str(key["weight_dtype"])
    rows = m * table.compute_units / compute_units if compute_units else float(m)
    columns = table.columns(dtype, weight, rows)
    if not columns:
        return None
    allowed = {_frozen(c) for c in candidates}
    carried = not table.measured(columns, n)
    for _, shape in table.scores(columns, n):
        for config in (_filled(shape, n, dtype) if carried else [config_of(shape, n, dtype)]):
            if config is not None and _frozen(config) in allowed:
                return config
    return None


def _filled(shape: Shape, n: int, dtype: str) -> list[dict[str, int | str] | None]:
    """``shape`` at ``n`` with its block filled (:data:`MULTI_ROW_BLOCK`), then with half
    as many rows each time down to the shape's own."""
    full = config_of(shape, n, dtype, MULTI_ROW_BLOCK)
    if full is None:
        return [None]
    out: list[dict[str, int | str] | None] = [full]
    rows = int(full["rows_per_block"])
    while rows > shape[1]:
        rows //= 2
        out.append({**full, "rows_per_block": rows})
    return out


def _frozen(config: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(config.items()))


def encode(table: DefaultTable) -> dict[str, Any]:
    """``table`` as JSON data (what ``default.json`` holds under ``table``)."""
    return {
        "compute_units": table.compute_units,
        "shape_fields": ["log2_vectors_per_thread", "rows_per_block", "vector_bytes", "row_storage", "occupancy",
                         "cluster", "cache_hints"],
        "cells": [
            {"dtype": d, "weight_dtype": w, "M": m, "N": n,
             "shapes": [[*shape, round(slow, 4)] for shape, slow in sorted(cell.items(), key=lambda kv: kv[1])]}
            for (d, w, m, n), cell in sorted(table.cells.items())
        ],
    }


def decode(data: Mapping[str, Any]) -> DefaultTable:
    """The table :func:`encode` wrote (shapes of a table from before clusters have five
    fields and mean cluster 1; from before cache hints, six, and mean ``none``)."""
    cells: dict[tuple[str, str, int, int], dict[Shape, float]] = {}
    for cell in data["cells"]:
        shapes: dict[Shape, float] = {}
        for entry in cell["shapes"]:
            *fields, slow = entry
            shift, rows, vbytes, storage, occupancy, *rest = fields
            cluster = int(rest[0]) if rest else 1
            hints = str(rest[1]) if len(rest) > 1 else "none"
            shapes[(int(shift), int(rows), int(vbytes), str(storage), int(occupancy), cluster, hints)] = float(slow)
        cells[(str(cell["dtype"]), str(cell["weight_dtype"]), int(cell["M"]), int(cell["N"]))] = shapes
    return DefaultTable(int(data["compute_units"]), cells)


def build(measured: Sequence[tuple[Mapping[str, Any], Sequence[tuple[Mapping[str, Any], float]]]],
          compute_units: int, keep: int, within: float) -> DefaultTable:
    """A table from measured keys: for each ``(key, [(config, median µs), …])`` the
    ``keep`` fastest shapes no more than ``within`` (log) slower than the key's best."""
    cells: dict[tuple[str, str, int, int], dict[Shape, float]] = {}
    for key, timed in measured:
        n, dtype = int(key["N"]), str(key["dtype"])
        best = min(t for _, t in timed)
        cell: dict[Shape, float] = {}
        for config, t in sorted(timed, key=lambda ct: ct[1]):
            slow = math.log(t / best)
            shape = shape_of(config, n, dtype)
            if slow > within or len(cell) >= keep:
                break
            cell.setdefault(shape, slow)
        cells[(dtype, str(key["weight_dtype"]), int(key["M"]), n)] = cell
    return DefaultTable(compute_units, cells)


@functools.cache
def table() -> DefaultTable:
    """The shipped table."""
    text = resources_files("flyconfigs.kernels.rmsnorm").joinpath("default.json").read_text(encoding="utf-8")
    return decode(json.loads(text)["table"])
