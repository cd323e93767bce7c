"""aiter's tuned GEMM CSVs become imported artifacts: one per row, every cell typed, aiter's
own measurements kept as reported figures (never as a flyconfigs timing), the device
derived from ``gfx`` and ``cu_num`` and said to be; validate accepts them and resolve
serves them to a GPU of that arch and CU count.  The fixtures are real aiter files
(tests/data/upstream/README.md); the bad ones are copies with one thing changed."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from flyconfigs.adapters.aiter import family_of, import_aiter_file
from flyconfigs.cli import main
from flyconfigs.errors import ArtifactError
from flyconfigs.registry import Resolver

UPSTREAM = Path(__file__).parent / "data" / "upstream" / "aiter"
CSV = UPSTREAM / "a8w8_bpreshuffle_tuned_gemm.csv"
BEFORE_GFX = UPSTREAM / "before-gfx-column" / "a8w8_bpreshuffle_tuned_gemm.csv"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_row_becomes_an_artifact_with_its_cells_typed() -> None:
    rows = _rows(CSV)
    result = import_aiter_file(CSV)
    assert result.refused == [] and len(result.artifacts) == len(rows) == 598
    for number, (row, artifact) in enumerate(zip(rows, result.artifacts, strict=True), start=2):
        assert artifact.key == {"M": int(row["M"]), "N": int(row["N"]), "K": int(row["K"]), "q_dtype_w": row["q_dtype_w"]}
        assert artifact.winner.config == {"libtype": row["libtype"], "kernelId": int(row["kernelId"]),
                                          "splitK": int(row["splitK"]), "kernelName": row["kernelName"]}
        assert artifact.kernel.name == "aiter_gemm_a8w8_bpreshuffle" and artifact.selection.rule == "imported"
        assert artifact.winner.timing is None and artifact.candidates[0].timing is None
        source = artifact.provenance.source
        assert source is not None and source.entry == f"line {number}"
        assert source.reported == {"us": float(row["us"]), "tflops": float(row["tflops"]), "bw": float(row["bw"]),
                                   "errRatio": float(row["errRatio"])}
        assert (artifact.device.arch, artifact.device.compute_units) == (row["gfx"], int(row["cu_num"]))


def test_the_device_is_derived_from_gfx_and_cu_num_and_names_no_product() -> None:
    result = import_aiter_file(CSV, revision="1ba09a4743280a8c2a2ae1ebfbd99fafb1804b1d")
    mi300 = [a for a in result.artifacts if (a.device.arch, a.device.compute_units) == ("gfx942", 304)]
    assert len(mi300) == 32
    device = mi300[0].device
    assert (device.vendor, device.product, device.features, device.wave_size) == ("amd", "AMD gfx942, 304 CUs", [], 64)
    source = mi300[0].provenance.source
    assert source is not None and "gfx=gfx942 and cu_num=304" in source.device_from and "no product" in source.device_from
    assert source.project == "ROCm/aiter" and source.file == "aiter/configs/a8w8_bpreshuffle_tuned_gemm.csv"
    assert source.url == ("https://github.com/ROCm/aiter/blob/1ba09a4743280a8c2a2ae1ebfbd99fafb1804b1d/aiter/configs/"
                          "a8w8_bpreshuffle_tuned_gemm.csv")


def test_a_file_from_before_the_gfx_column_derives_the_arch_from_the_cu_count_where_the_catalog_can(tmp_path: Path) -> None:
    rows = _rows(BEFORE_GFX)
    result = import_aiter_file(BEFORE_GFX)
    # 304 CUs (the MI300 class) and 80 (the MI308X) are gfx942, 256 (the MI350 class) gfx950.
    assert len(result.artifacts) == len(rows) == 550 and result.refused == []
    assert {(a.device.arch, a.device.compute_units) for a in result.artifacts} == {("gfx942", 304), ("gfx942", 80),
                                                                                  ("gfx950", 256)}
    source = next(a for a in result.artifacts if a.device.compute_units == 304).provenance.source
    assert source is not None and "no gfx column" in source.device_from and "304 CUs is gfx942" in source.device_from
    # A CU count no product of the catalog has: nothing says which arch.
    text = BEFORE_GFX.read_text().splitlines()
    header = text[0].split(",")
    cells = text[1].split(",")
    cells[header.index("cu_num")] = "77"
    odd = tmp_path / BEFORE_GFX.name
    odd.write_text("\n".join([text[0], ",".join(cells), *text[2:]]) + "\n")
    result = import_aiter_file(odd)
    assert len(result.refused) == 1 and len(result.artifacts) == len(rows) - 1
    assert {e.problems[0].field.split(".")[1] for e in result.refused} == {"cu_num"}


def test_validate_accepts_them_and_resolve_serves_them_to_that_arch_and_cu_count(tmp_path: Path) -> None:
    out = tmp_path / "imported"
    assert main(["import", "aiter", str(CSV), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["gfx1250", "gfx942", "gfx950"]
    assert main(["validate", str(out / "gfx942")]) == 0
    resolver = Resolver(paths=[str(out / "gfx942")], detector=None)
    key = {"M": 64, "N": 1536, "K": 5120, "q_dtype_w": "torch.int8"}  # line 4: gfx942, cu_num 304
    for product in ("MI300X", "MI325X"):
        served = resolver.resolve("aiter_gemm_a8w8_bpreshuffle", key, device=product)
        assert (served.source, served.layer, served.key_match) == ("override", "same-compute-units", "exact")
        assert dict(served.config) == {"libtype": "asm", "kernelId": 0, "splitK": 1,
                                       "kernelName": "_ZN5aiter41I8gemm_bf16_perTokenI8_BpreShuffle_16x128E"}
    assert resolver.resolve("aiter_gemm_a8w8_bpreshuffle", key, device="H200").source == "default"


def test_a_row_that_cannot_be_represented_is_refused_alone_naming_its_line_and_column(tmp_path: Path) -> None:
    lines = CSV.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace(",asm,0,8,", ",asm,zero,8,")  # kernelId
    lines[2] = lines[2].replace("gfx942,80,", "gfx942,0,")  # cu_num
    lines[3] = lines[3].replace(",3,4,14.7532,", ",3,4,,")  # us
    lines.append(lines[5].replace(",asm,", ",ck,", 1))  # the same shape again, another config
    bad = tmp_path / CSV.name
    bad.write_text("".join(lines))
    result = import_aiter_file(bad)
    fields = [e.problems[0].field for e in result.refused]
    assert fields[:3] == ["line 2.kernelId", "line 3.cu_num", "line 4.us"]
    assert fields[-1] == f"line {len(lines)}" and "same gfx, cu_num and key as line 6" in str(result.refused[-1])
    assert len(result.artifacts) == 598 - len(fields) + 1


@pytest.mark.parametrize("header, field", [
    ("gfx,cu_num,M,N,K,q_dtype_w,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio,extra", "line 1.extra"),
    ("gfx,cu_num,M,N,q_dtype_w,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio", "line 1"),
])
def test_a_header_that_cannot_be_read_refuses_the_file(tmp_path: Path, header: str, field: str) -> None:
    bad = tmp_path / CSV.name
    bad.write_text(header + "\n")
    with pytest.raises(ArtifactError) as info:
        import_aiter_file(bad)
    assert info.value.problems[0].field == field and info.value.file == str(bad)


def test_a_file_saved_with_a_byte_order_mark_reads_as_aiter_reads_it(tmp_path: Path) -> None:
    marked = tmp_path / CSV.name
    marked.write_bytes(b"\xef\xbb\xbf" + CSV.read_bytes())
    result = import_aiter_file(marked)
    assert result.refused == [] and len(result.artifacts) == 598
    assert [a.to_json_bytes() for a in result.artifacts] == [a.to_json_bytes() for a in import_aiter_file(CSV).artifacts]


def test_the_family_is_read_from_the_file_name_as_aiter_names_its_files(tmp_path: Path) -> None:
    assert family_of("a8w8_bpreshuffle_tuned_gemm.csv").family == "a8w8_bpreshuffle"
    assert family_of("dsv3_a8w8_bpreshuffle_tuned_gemm.csv").family == "a8w8_bpreshuffle"
    assert family_of("a8w8_bpreshuffle_tuned_gemm_glm47.csv").family == "a8w8_bpreshuffle"
    assert family_of("a8w8_blockscale_tuned_gemm_ds_v3.csv").family == "a8w8_blockscale"
    with pytest.raises(ArtifactError, match="names no declared aiter GEMM family"):
        family_of("a8w8_blockscale_bpreshuffle_tuned_gemm.csv")


BLOCKSCALE = UPSTREAM / "model_configs-gfx942-rows" / "a8w8_blockscale_tuned_gemm_ds_v3.csv"


def test_a_models_blockscale_file_is_its_family_keyed_by_m_n_k_and_served_on_an_mi300x(tmp_path: Path) -> None:
    rows = _rows(BLOCKSCALE)
    result = import_aiter_file(BLOCKSCALE, upstream_dir="aiter/configs/model_configs")
    assert result.refused == [] and len(result.artifacts) == len(rows) == 295
    first = result.artifacts[0]
    assert first.kernel.name == "aiter_gemm_a8w8_blockscale"
    assert first.key == {"M": int(rows[0]["M"]), "N": int(rows[0]["N"]), "K": int(rows[0]["K"])}
    assert first.provenance.source is not None
    assert first.provenance.source.file == "aiter/configs/model_configs/a8w8_blockscale_tuned_gemm_ds_v3.csv"
    out = tmp_path / "imported"
    assert main(["import", "aiter", str(BLOCKSCALE), "--out", str(out)]) == 0
    served = Resolver(paths=[str(out / "gfx942")], detector=None).resolve("aiter_gemm_a8w8_blockscale", dict(first.key),
                                                                         device="MI300X")
    assert (served.source, dict(served.config)) == ("override", dict(first.winner.config))


def test_a_row_the_csv_module_cannot_read_is_refused_naming_its_line_and_ends_the_file(tmp_path: Path) -> None:
    lines = CSV.read_text().splitlines(keepends=True)
    bad = tmp_path / CSV.name
    huge = lines[2].replace(",asm,", "," + "x" * 200_000 + ",", 1)  # over the csv module's cell size limit
    bad.write_text(lines[0] + lines[1] + huge + lines[3])
    result = import_aiter_file(bad)
    assert len(result.artifacts) == 1
    (refused,) = result.refused
    assert refused.file == str(bad) and refused.problems[0].field == "line 3"
    assert "not readable as CSV" in refused.problems[0].message
    bad.write_text("x" * 200_000 + "\n")
    with pytest.raises(ArtifactError) as info:
        import_aiter_file(bad)
    assert info.value.problems[0].field == "line 1" and "not readable as CSV" in info.value.problems[0].message
