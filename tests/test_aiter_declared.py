"""aiter families declared from data: a layout flyconfigs has not seen is a JSON file (its
header, key columns, measured columns and one of aiter's lookup rules), no Python.  The
first is the FlyDSL a8w8 bpreshuffle GEMM file (corpora/aiter-acf9add4): imported, served
as aiter's ``get_flydsl_gemm_config`` serves it, and exported back byte for byte."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from flyconfigs.adapters.aiter import import_aiter_file
from flyconfigs.adapters.aiter_export import export_aiter
from flyconfigs.errors import ArtifactError
from flyconfigs.kernels.aiter_declared import DECLARED, FOLDER, declared_families, family_from_data
from flyconfigs.kernels.aiter_gemm import FAMILIES, family_of
from flyconfigs.registry import kernel_declaration
from flyconfigs.registry.resolve import Resolver
from flyconfigs.schema import write_atomic

ROOT = Path(__file__).resolve().parents[1]
FLYDSL_CSV = ROOT / "corpora" / "aiter-acf9add4" / "aiter" / "configs" / "flydsl_a8w8_bpreshuffle_tuned_gemm.csv"
MI308X = "gfx942:80:AMD Instinct MI308X"
TILES = ("tile_m", "tile_n", "tile_k", "lds_stage", "use_cshuffle_epilog", "use_async_copy", "waves_per_eu")


def _aiters_lookup(rows: list[dict[str, str]], m: int, n: int, k: int, q: str, cu_num: int) -> dict[str, int] | None:
    """``get_flydsl_gemm_config`` at acf9add4, restated: the exact key, else the rows of
    the same (cu_num, N, K, q_dtype_w) sorted by M, the first of the nearest M."""
    same = sorted(((int(r["M"]), r) for r in rows if (int(r["cu_num"]), int(r["N"]), int(r["K"]), r["q_dtype_w"])
                   == (cu_num, n, k, q)), key=lambda pair: pair[0])
    exact = [r for tuned, r in same if tuned == m]
    if exact:
        return {f: int(exact[-1][f]) for f in TILES}
    if not same:
        return None
    return {f: int(min(same, key=lambda pair: abs(pair[0] - m))[1][f]) for f in TILES}


def test_the_flydsl_gemm_family_is_declared_from_data_and_through_the_entry_point_group() -> None:
    family = family_of(FLYDSL_CSV.name)
    assert family is DECLARED.flydsl_gemm_a8w8_bpreshuffle and FAMILIES[family.name] is family
    assert kernel_declaration("aiter_flydsl_gemm_a8w8_bpreshuffle") is family
    assert family.key == ("cu_num", "M", "N", "K", "q_dtype_w") and family.config == TILES
    assert family.rule == "nearest" and not list(FOLDER.glob("*.py"))


def test_the_flydsl_gemm_file_is_imported_served_as_aiter_serves_it_and_exported_byte_for_byte(tmp_path: Path) -> None:
    imported = import_aiter_file(FLYDSL_CSV, revision="acf9add458c17abba272555f1619ba96e00109d1")
    assert imported.refused == [] and sum(len(t.rows) for t in imported.tables) == 526
    folder = tmp_path / "imported"
    for table in imported.tables:
        write_atomic(folder / f"{table.kernel.name}-{len(table.rows)}.json", table.model_dump_json().encode())
    with open(FLYDSL_CSV, newline="") as f:
        rows = list(csv.DictReader(f))
    resolver = Resolver(paths=[str(folder)], detector=None, packages=False)
    shapes = sorted({(int(r["N"]), int(r["K"]), r["q_dtype_w"]) for r in rows})
    tried = 0
    for n, k, q in [*shapes, (1280, 4096, "torch.int8")]:
        for m in (1, 3, 4, 5, 10, 16, 17, 33, 100, 256, 257, 288, 289, 300, 352, 353, 1000, 1024, 5000):
            want = _aiters_lookup(rows, m, n, k, q, 80)
            served = resolver.resolve("aiter_flydsl_gemm_a8w8_bpreshuffle",
                                      {"M": m, "N": n, "K": k, "q_dtype_w": q}, MI308X)
            assert dict(served.config) == (want or {}), (m, n, k, q, served)
            tried += 1
    assert tried == 19 * (len(shapes) + 1) and resolver.problems.problems() == []
    written = export_aiter(imported.tables, tmp_path / "out")
    assert [w.upstream for w in written] == ["aiter/configs/flydsl_a8w8_bpreshuffle_tuned_gemm.csv"]
    assert written[0].path.read_bytes() == FLYDSL_CSV.read_bytes()


def _declaration(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FOLDER / "flydsl_gemm_a8w8_bpreshuffle.json").read_text())
    return {**data, **changes}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"rule": "closest"}, "rule"),
        ({"key": ["cu_num", "M", "P"]}, "key"),
        ({"key": ["M", "N", "K", "q_dtype_w"]}, "key"),  # cu_num is in the header
        ({"lookup": "x"}, "lookup"),
        ({"format": "2"}, "format"),
        ({"header": "cu_num,M,M"}, "header"),
        ({"types": {"tile_m": "int"}}, "types"),
    ],
)
def test_a_family_file_it_cannot_read_names_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ArtifactError) as caught:
        family_from_data(_declaration(**changes), "new.json")
    assert caught.value.problems[0].field == field and "new.json" in str(caught.value)


def test_a_new_layout_is_imported_from_its_family_file_alone(tmp_path: Path) -> None:
    folder = tmp_path / "families"
    folder.mkdir()
    (folder / "toy.json").write_text(json.dumps({
        "format": "flyconfigs aiter family 1", "family": "toy_gemm", "files": ["toy_tuned_gemm"], "env": None,
        "header": "gfx,cu_num,M,N,K,splitK,block,us,score", "key": ["cu_num", "M", "N", "K"], "measured": ["score"],
        "rule": "gemm", "types": {"N": "int"}, "summary": "a layout of its own"}))
    family = declared_families(folder)["toy_gemm"]
    assert family.config == ("splitK", "block") and family.measured_columns >= {"us", "score"}
    csv_file = tmp_path / "toy_tuned_gemm.csv"
    csv_file.write_bytes(b"gfx,cu_num,M,N,K,splitK,block,us,score\ngfx942,304,16,64,8,1,a,7.780,0.5\n"
                         b"gfx942,304,64,64,8,2,b,1.0,1\n")
    imported = import_aiter_file(csv_file, family=family)
    assert imported.refused == [] and [len(t.rows) for t in imported.tables] == [2]
    table = imported.tables[0]
    assert table.columns.measured == ["us", "score"] and table.config_of(1) == {"splitK": 2, "block": "b"}
    asked = {"cu_num": 304, "M": 33, "N": 64, "K": 8}
    assert family.key_distance(asked, {**asked, "M": 48}) == (1.0,)  # aiter's GEMM padding, declared by name
    assert family.key_distance(asked, {**asked, "M": 64}) == (2.0,)
    assert family.key_distance(asked, {**asked, "M": 40}) is None
