"""The aiter corpus the tests and the benchmarks read (corpora/aiter-e4048607), how two
aiter CSVs are compared: as aiter reads them, with pandas (a number is its value, a short
row's missing cells are empty), header for header, rows as a multiset; and aiter's own
lookup over the CSV rows (:class:`Reference`), restated from its source at the corpus's
revision (ORIGIN.md names the functions), sharing no code with the families' rules but
the column lists the declarations state."""

from __future__ import annotations

import collections
import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flyconfigs.kernels.aiter_family import AiterFamily, cell_value
from flyconfigs.kernels.aiter_gemm import family_of

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "corpora" / "aiter-e4048607"
REVISION = "e4048607a535ace3a2b51ded31b1c8c2d45c0879"


def tuned_files() -> list[Path]:
    """Every tuned CSV of the corpus (untuned shapes and the README left out)."""
    return sorted(p for p in (CORPUS / "aiter").rglob("*.csv") if "untuned" not in p.name)


def upstream_path(path: Path) -> str:
    """The file's path in aiter (``aiter/configs/…``)."""
    return path.relative_to(CORPUS).as_posix()


def read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    """The header and the non-empty rows of a CSV, short rows padded with empty cells."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = [r for r in csv.reader(f)]
    header, body = rows[0], [r for r in rows[1:] if r]
    return header, [r + [""] * (len(header) - len(r)) for r in body]


def as_read(row: list[str]) -> tuple[Any, ...]:
    """A row as pandas gives its values (numbers compared as numbers)."""
    return tuple(cell_value(c) for c in row)


def compare(upstream: Path, exported: Path, left_out: tuple[int, ...] = ()) -> list[str]:
    """What differs between an upstream CSV and its export, as aiter reads them (rows
    in any order); ``left_out``: upstream line numbers refused at import."""
    header, rows = read_rows(upstream)
    with open(upstream, newline="", encoding="utf-8-sig") as f:
        numbered = [(n, r) for n, r in enumerate(csv.reader(f), start=1) if r and n > 1]
    rows = [r + [""] * (len(header) - len(r)) for n, r in numbered if n not in left_out]
    got_header, got = read_rows(exported)
    if got_header != header:
        return [f"header {got_header} != {header}"]
    want, have = collections.Counter(map(as_read, rows)), collections.Counter(map(as_read, got))
    return [f"missing {row}" for row in (want - have)] + [f"extra {row}" for row in (have - want)]


__all__ = ["CORPUS", "REVISION", "ROOT", "Reference", "as_read", "batched_m", "compare", "family_of", "moe_token", "pow2", "read_rows",
           "tuned_files", "upstream_path"]


def pow2(n: int) -> int:
    """The next power of two (``nextPow2``)."""
    return 1 if n <= 1 else 2 ** (n - 1).bit_length()


def fine(m: int) -> int:
    """``getPaddedM(M, N, K, 0)``."""
    step = 16 if m <= 256 else 32 if m <= 1024 else 64 if m <= 4096 else 128
    return -(-m // step) * step


def coarse(m: int, n: int) -> int:
    """``getPaddedM(M, N, K, 1)``."""
    return 8192 if m > 8192 and n > 4096 else pow2(m)


def batched_m(m: int) -> int:
    """``padded_m`` of the CK batched GEMMs' C++ dispatch (``batched_rowwise_dispatch``,
    ``batched_dispatch``)."""
    if m > 1 and m <= 16:
        return 16
    if m <= 16384:
        return pow2(m)
    if m <= 20480:
        return 20480
    return m


def moe_token(token: int) -> int:
    """``get_padded_M`` of fused_moe.py."""
    return pow2(token) if token < 32768 else (131072 if token >= 131072 else 32768)


_GROUPED_MATCHED = ("gfx", "cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype",
                    "q_dtype_a", "q_dtype_w", "q_type")
"""The columns ``_find_grouped_config`` compares (not ``use_g1u1``, ``doweight_stage1``)."""
_OPUS_ACTS = ("ActivationType.Silu", "ActivationType.Swiglu", "ActivationType.Situv2")


def _us(row: dict[str, Any]) -> float:
    """A row's ``us`` as ``_find_grouped_config`` sorts by it: ``float(us or 0.0)``."""
    return float(row.get("us") or 0.0)


def _place(path: Path) -> str:
    """The file's path in aiter, or its name for a file from elsewhere."""
    return upstream_path(path) if path.is_relative_to(CORPUS) else path.name


class Reference:
    """aiter's lookup over one family's rows: its files merged as aiter merges them (the
    default file ``aiter/configs/<stem>.csv`` first, then the per-model files), by device."""

    def __init__(self, family: AiterFamily, files: list[Path]) -> None:
        self.family = family
        default = {f"aiter/configs/{stem}.csv" for stem in family.stems}
        self.merged: list[dict[str, Any]] = []
        for path in sorted(files, key=lambda p: (_place(p) not in default, _place(p))):
            header, rows = read_rows(path)
            for values in map(as_read, rows):
                cells = dict(zip(header, values, strict=True))
                if cells.get("_tag") == "flydsl_fallback":
                    continue  # get_2stage_cfgs drops them before its lookup
                cells["gfx"] = cells.get(family.arch_column) or ("gfx942" if cells["cu_num"] in (80, 304) else "gfx950")
                self.merged.append(cells)
        self.rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.any_act: dict[tuple[Any, ...], dict[str, Any]] = {}
        for cells in self.merged:
            slot = (cells["gfx"], *(cells[c] for c in family.key))
            if family.on_duplicate == "lowest-us" and slot in self.rows and _us(self.rows[slot]) > _us(cells):
                self.rows[slot] = cells
            self.rows.setdefault(slot, cells)
            # get_2stage_cfgs' second dict: act_type disabled, the first row of each key kept.
            self.any_act.setdefault((cells["gfx"], *(cells[c] for c in family.key if c != "act_type")), cells)

    def config(self, arch: str, key: dict[str, Any]) -> dict[str, Any]:
        """The config aiter's lookup finds for ``key`` on a GPU of ``arch`` (and the key's
        ``cu_num``), ``{}`` for none."""
        row = self._grouped(arch, key) if self.family.family == "grouped_fmoe" else self._row(arch, key)
        if row is None:
            return {}
        if self.family.family in ("fmoe", "fhmoe") and str(row.get("kernelName1") or "").startswith("opus_") \
                and key["act_type"] not in _OPUS_ACTS:
            return {}  # get_2stage_cfgs discards it and takes its default heuristics
        return {c: v for c, v in row.items() if c in self.family.config}

    def _row(self, arch: str, key: dict[str, Any]) -> dict[str, Any] | None:
        for asked in self._tries(key):
            row = self.rows.get((arch, *(asked[c] for c in self.family.key)))
            if row is None and self.family.family == "fmoe":  # the retry with any activation
                row = self.any_act.get((arch, *(asked[c] for c in self.family.key if c != "act_type")))
            if row is not None:
                return row
        return None

    def _grouped(self, arch: str, key: dict[str, Any]) -> dict[str, Any] | None:
        """``_find_grouped_config``: the rows matching every compared column, else every one
        but ``cu_num``; the lowest ``us`` (a stable sort: the first row of equals)."""
        asked = {**key, "gfx": arch, "token": moe_token(key["token"])}
        for relaxed in ((), ("cu_num",)):
            found = [r for r in self.merged
                     if all(r[c] == asked[c] for c in _GROUPED_MATCHED if c not in relaxed)]
            if found:
                return sorted(found, key=_us)[0]
        return None

    def _tries(self, key: dict[str, Any]) -> Iterator[dict[str, Any]]:
        rule = self.family.rule
        if rule == "gemm":
            m, n = ("m", "n") if "m" in key else ("M", "N")
            for value in (key[m], fine(key[m]), coarse(key[m], key[n])):
                yield {**key, m: value}
        elif rule == "batched-gemm":  # the C++ dispatch: the exact M, then the padded M
            yield key
            yield {**key, "M": batched_m(key["M"])}
        elif rule in ("moe", "moe-exact"):
            token = moe_token(key["token"])
            yield {**key, "token": token}
            if rule == "moe" and token > 32768:
                yield {**key, "token": 32768}
        else:
            yield key
