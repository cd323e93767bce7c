"""What flyconfigs serves from the imported aiter corpus is what aiter's own lookup finds
in its CSVs, on every (file, M) pair tried: each tuned M, its neighbours, the midpoints
between tuned Ms and the padding boundaries, on the device each row was tuned for.

The reference (``aiter_corpus.Reference``) restates aiter's lookup from its source at the
corpus's revision (corpora/aiter-e4048607/ORIGIN.md names the functions) over the CSV rows
themselves, read as pandas reads them, with a family's files merged as aiter merges them;
it shares no code with the families' ``key_distance`` but the column lists the
declarations state."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from aiter_corpus import REVISION, Reference, fine, pow2, tuned_files
from flyconfigs.adapters.aiter import import_aiter_file
from flyconfigs.kernels.aiter_family import MEASURED, AiterFamily
from flyconfigs.kernels.aiter_gemm import FAMILIES, family_of
from flyconfigs.registry.resolve import Resolver
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import write_atomic
from flyconfigs.schema.table import Table


def _asked_ms(tuned: list[int]) -> set[int]:
    """Each tuned M, its neighbours, the midpoints between tuned Ms, the paddings' edges."""
    found = set(tuned)
    for m in tuned:
        found.update({m - 1, m + 1, fine(m) + 1, pow2(m) // 2 + 1, 2 * m, 3 * m})
    for a, b in itertools.pairwise(sorted(set(tuned))):
        found.update({(a + b) // 2, (a + b + 1) // 2})
    return {m for m in found if m >= 1}


def _check(family: AiterFamily, files: list[Path], tmp_path: Path, rows_per_table: int | None) -> int:
    tables: list[Table] = []
    for path in files:
        tables.extend(import_aiter_file(path, REVISION).tables)
    for table in tables:
        write_atomic(tmp_path / table.device.arch / table.file_name(), table.to_json_bytes())
    resolver = Resolver(paths=[str(tmp_path / arch) for arch in sorted({t.device.arch for t in tables})], detector=None)
    reference = Reference(family, files)
    # The axis varied: the one aiter pads, else (an exact family) its first int axis, whose
    # neighbours must miss as aiter's exact lookup misses.
    axis = family.ordinal_axis or next(a.name for a in family.key_axes if a.kind is int and a.name != "cu_num")
    tried = 0
    for table in tables:
        device = DeviceQuery.of(table.device.identity)
        keys = [{k: v for k, v in table.key_of(i).items() if k != "flydsl_fallback"} for i in range(len(table.rows))]
        if rows_per_table is not None:
            keys = keys[:: max(1, len(keys) // rows_per_table)]
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for key in keys:
            groups.setdefault(tuple(v for c, v in key.items() if c != axis), []).append(key)
        for same in groups.values():
            for value in sorted(_asked_ms([k[axis] for k in same])):
                asked = {**same[0], axis: value}
                served = resolver.resolve(family.name, asked, device)
                want = reference.config(table.device.arch, asked)
                assert dict(served.config) == want, (family.name, table.provenance.source, asked, served)
                tried += 1
    assert resolver.problems.problems() == []
    return tried


def _files(family: AiterFamily) -> list[Path]:
    return [p for p in tuned_files() if family_of(p.name) is family]


@pytest.mark.parametrize("name", ["aiter_gemm_a8w8_bpreshuffle", "aiter_fhmoe", "aiter_flydsl_chunk_gdn_h",
                                  "aiter_batched_gemm_a8w8"])
def test_served_is_what_aiters_lookup_finds_on_four_families(name: str, tmp_path: Path) -> None:
    family = FAMILIES[name]
    files = [p for p in _files(family) if p.stat().st_size < 120_000][:2]
    assert files and _check(family, files, tmp_path, rows_per_table=12) > 20


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(f.name for f in FAMILIES.values() if _files(f)))
def test_served_is_what_aiters_lookup_finds_on_every_family(name: str, tmp_path: Path) -> None:
    family = FAMILIES[name]
    assert _check(family, _files(family), tmp_path, rows_per_table=40) > 0


def test_a_batched_gemm_is_served_the_padded_row_its_cpp_dispatch_runs() -> None:
    # B=16, M=17, N=8192, K=1024 on an MI300X: batched_rowwise_dispatch misses M=17, then finds the M=32 row.
    resolver = Resolver(paths=[str(Path(__file__).resolve().parents[1] / "imported" / "aiter-gfx942")], detector=None,
                        packages=False)
    r = resolver.resolve("aiter_batched_gemm_a8w8", {"B": 16, "M": 17, "N": 8192, "K": 1024}, "MI300X")
    assert r.key_match == "nearest" and dict(r.matched_key or {})["M"] == 32 and r.config["kernelId"] == 62
    assert dict(r.filled_in) == {"cu_num": 304}
    miss = resolver.resolve("aiter_batched_gemm_a8w8", {"B": 16, "M": 17, "N": 8192, "K": 1000}, "MI300X")
    assert miss.source == "default" and dict(miss.config) == {}  # aiter's heuristic


def test_the_measurements_are_never_part_of_a_config() -> None:
    assert not any(set(f.config) & MEASURED for f in FAMILIES.values())
