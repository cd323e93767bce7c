"""The aiter corpus the tests and the benchmarks read (corpora/aiter-e4048607), and how
two aiter CSVs are compared: as aiter reads them, with pandas (a number is its value, a
short row's missing cells are empty), header for header, rows as a multiset."""

from __future__ import annotations

import collections
import csv
from pathlib import Path
from typing import Any

from flyconfigs.kernels.aiter_family import cell_value
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


__all__ = ["CORPUS", "REVISION", "ROOT", "as_read", "compare", "family_of", "read_rows", "tuned_files", "upstream_path"]
