"""aiter's tuned CSVs become imported tables, one per (file, device): key cells typed as
aiter's lookup compares them, the other cells as pandas reads them, the measurements kept
as measurements (never a flyconfigs timing), the device derived from ``gfx``/``arch`` and
``cu_num`` and said to be.  Every tuned CSV of aiter at the corpus's revision imports; a
row is refused only where the file itself is broken or aiter never serves it.  The
fixtures are real aiter files (corpora/aiter-e4048607, tests/data/upstream/README.md); the
bad ones are copies with one thing changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiter_corpus import CORPUS, REVISION, read_rows, tuned_files
from flyconfigs.adapters.aiter import import_aiter_file
from flyconfigs.errors import ArtifactError
from flyconfigs.kernels.aiter_gemm import FLYDSL_GDR_DECODE
from flyconfigs.registry import Resolver
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import write_atomic

CONFIGS = CORPUS / "aiter" / "configs"
BPRESHUFFLE = CONFIGS / "a8w8_bpreshuffle_tuned_gemm.csv"
BEFORE_GFX = Path(__file__).parent / "data" / "upstream" / "aiter" / "before-gfx-column" / "a8w8_bpreshuffle_tuned_gemm.csv"
MI308X = DeviceQuery("amd", "gfx942", "AMD Instinct MI308X", 80, ())


def test_a_file_is_one_table_per_device_with_every_row_typed() -> None:
    result = import_aiter_file(BPRESHUFFLE, REVISION)
    header, rows = read_rows(BPRESHUFFLE)
    assert result.refused == [] and sum(len(t.rows) for t in result.tables) == len(rows)
    by_device = {t.device.identity.describe(): t for t in result.tables}
    assert sorted(by_device) == ["gfx1250 'AMD gfx1250, 256 CUs' 256 CUs", "gfx942 'AMD gfx942, 304 CUs' 304 CUs",
                                 "gfx942 'AMD gfx942, 80 CUs' 80 CUs", "gfx950 'AMD gfx950, 256 CUs' 256 CUs"]
    table = by_device["gfx942 'AMD gfx942, 304 CUs' 304 CUs"]
    assert table.kernel.name == "aiter_gemm_a8w8_bpreshuffle" and table.selection.rule == "imported"
    assert table.columns.key == ["cu_num", "M", "N", "K", "q_dtype_w"]
    assert table.columns.config == ["libtype", "kernelId", "splitK", "kernelName"]
    assert table.columns.measured == ["us", "tflops", "bw", "errRatio"] and table.layout == header
    first = int(table.entry_of(0).removeprefix("line "))
    cells = dict(zip(header, rows[first - 2], strict=True))
    assert table.key_of(0) == {"cu_num": 304, "M": int(cells["M"]), "N": int(cells["N"]), "K": int(cells["K"]),
                               "q_dtype_w": cells["q_dtype_w"]}
    assert table.config_of(0)["kernelId"] == int(cells["kernelId"]) and table.measured_of(0)["us"] == float(cells["us"])
    source = table.provenance.source
    assert source is not None and source.file == "aiter/configs/a8w8_bpreshuffle_tuned_gemm.csv"
    assert source.url == f"https://github.com/ROCm/aiter/blob/{REVISION}/aiter/configs/a8w8_bpreshuffle_tuned_gemm.csv"
    assert "gfx=gfx942 and cu_num=304" in source.device_from and "names no product" in source.device_from


def test_a_file_without_gfx_takes_the_arch_from_the_cu_count_through_the_catalog() -> None:
    result = import_aiter_file(BEFORE_GFX)
    assert result.refused == []
    assert {(t.device.arch, t.device.compute_units) for t in result.tables} == {("gfx942", 304), ("gfx942", 80),
                                                                                ("gfx950", 256)}
    fmoe = import_aiter_file(CONFIGS / "tuned_fmoe.csv")
    assert fmoe.refused == [] and {(t.device.arch, t.device.compute_units) for t in fmoe.tables} == {("gfx942", 80)}
    source = fmoe.tables[0].provenance.source
    assert source is not None and "no gfx column" in source.device_from


def test_a_file_keyed_by_the_arch_alone_serves_every_gpu_of_that_arch(tmp_path: Path) -> None:
    # Its first 40 lines, all gfx942 rows (the file has 5,376).
    lines = (CORPUS / "aiter" / "ops" / "flydsl" / "gdr_decode_tuned.csv").read_text().splitlines(keepends=True)
    path = tmp_path / "source" / "gdr_decode_tuned.csv"
    path.parent.mkdir()
    path.write_text("".join(lines[:41]))
    result = import_aiter_file(path, upstream_dir="aiter/ops/flydsl")
    assert result.refused == [] and all(t.kernel.name == FLYDSL_GDR_DECODE.name for t in result.tables)
    table = next(t for t in result.tables if t.device.arch == "gfx942")
    assert table.device.product == "AMD gfx942" and "arch alone" in (table.provenance.source.device_from or "")
    write_atomic(tmp_path / table.file_name(), table.to_json_bytes())
    served = Resolver(paths=[str(tmp_path)], detector=None).resolve(FLYDSL_GDR_DECODE.name, table.key_of(0), MI308X)
    assert served.config == table.config_of(0) and served.borrowed  # aiter matches the arch only


@pytest.mark.slow
def test_every_tuned_csv_of_the_corpus_imports_whole_but_one_row_aiter_never_serves() -> None:
    refused = {}
    rows = tables = 0
    for path in tuned_files():
        result = import_aiter_file(path, REVISION)
        rows += sum(len(t.rows) for t in result.tables)
        tables += len(result.tables)
        refused.update({(path.name, p.field): p.message for e in result.refused for p in e.problems})
    # 117 tables of rows, and the header-only chunk_gdn_h_opt_tuned.csv kept once per published arch.
    assert (len(tuned_files()), tables, rows) == (88, 117 + 3, 59414)
    assert refused == {("tuned_grouped_fmoe.csv", "line 73"): "the same key as line 80, which aiter serves instead "
                                                              "(the lowest us of the rows that match)"}


def test_a_short_row_reads_as_pandas_reads_it() -> None:
    path = CONFIGS / "model_configs" / "dsv4_fp8fp4_tuned_fmoe.csv"
    result = import_aiter_file(path)
    assert result.refused == []
    table = result.tables[0]
    index = table.entries.index("line 9") if table.entries else -1
    assert table.config_of(index)["_tag"] is None and table.measured_of(index).get("bw") is None


def _copy(tmp_path: Path, name: str, change: tuple[str, str] | None = None, extra: str = "") -> Path:
    lines = BPRESHUFFLE.read_text().splitlines(keepends=True)[:4]
    if change is not None:
        lines[2] = lines[2].replace(*change)
    path = tmp_path / name
    path.write_text("".join(lines) + extra)
    return path


def test_a_row_that_cannot_be_represented_is_refused_alone_naming_its_line_and_column(tmp_path: Path) -> None:
    lines = BPRESHUFFLE.read_text().splitlines()
    bad_m = lines[2].split(",")
    bad_m[2] = "6x4"
    too_long = lines[3] + ",1"
    path = tmp_path / "a8w8_bpreshuffle_tuned_gemm.csv"
    path.write_text("\n".join([lines[0], lines[1], ",".join(bad_m), too_long, lines[1], ""]))
    result = import_aiter_file(path)
    problems = {p.field: p.message for e in result.refused for p in e.problems}
    assert problems["line 3.M"] == "expected an int, got '6x4'"
    assert "15 cells, the header has 14" in problems["line 4"]
    assert problems["line 5"].startswith("the same device and key as line 2")
    assert sum(len(t.rows) for t in result.tables) == 1


@pytest.mark.parametrize(("name", "header", "words"), [
    ("a8w8_bpreshuffle_tuned_gemm.csv", "gfx,cu_num,M,N,q_dtype_w,libtype,kernelId,splitK,kernelName", "no column K"),
    ("a8w8_bpreshuffle_tuned_gemm.csv", "gfx,cu_num,M,N,K,q_dtype_w,libtype,kernelId,splitK,kernelName,colour",
     "columns colour are not of aiter_gemm_a8w8_bpreshuffle"),
    ("a8w8_bpreshuffle_tuned_gemm.csv", "", "no header"),
    ("notes_tuned.csv", "M,N,K", "not a tuned file aiter reads for a declared family"),
])
def test_a_file_that_cannot_be_imported_is_refused_naming_its_field(tmp_path: Path, name: str, header: str,
                                                                      words: str) -> None:
    path = tmp_path / name
    path.write_text(header + "\n" if header else "")
    with pytest.raises(ArtifactError) as err:
        import_aiter_file(path)
    assert err.value.file == str(path) and words in str(err.value)


def test_a_file_saved_with_a_byte_order_mark_reads_as_aiter_reads_it(tmp_path: Path) -> None:
    marked = tmp_path / BPRESHUFFLE.name
    marked.write_bytes(b"\xef\xbb\xbf" + BPRESHUFFLE.read_bytes())
    with_mark, without = import_aiter_file(marked).tables, import_aiter_file(BPRESHUFFLE).tables
    # The same tables but for the spelling of the head, which keeps the mark to give it back.
    assert [t.model_dump(exclude={"spelling"}) for t in with_mark] == [t.model_dump(exclude={"spelling"}) for t in without]
    header = BPRESHUFFLE.read_text().splitlines(keepends=True)[0]
    assert {t.spelling.head for t in with_mark if t.spelling} == {"\ufeff" + header}
    assert {t.spelling.head for t in without if t.spelling} == {None}
