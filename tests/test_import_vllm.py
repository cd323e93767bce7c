"""vLLM's fused-MoE config files become imported artifacts: one per batch size, typed,
nothing added, the source and the device's derivation recorded; validate accepts them
and resolve serves them for the file's device and key.  The fixtures are real vLLM files
(tests/data/upstream/README.md); the bad ones are copies of them with one thing changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from flyconfigs.adapters.vllm import import_vllm_file, parse_file_name, vllm_file_name
from flyconfigs.cli import main
from flyconfigs.errors import ArtifactError
from flyconfigs.registry import Resolver
from flyconfigs.schema import Artifact, load_artifact

UPSTREAM = Path(__file__).parent / "data" / "upstream" / "vllm"
MI300X_FILE = UPSTREAM / "E=128,N=384,device_name=AMD_Instinct_MI300X.json"
H200_FILE = UPSTREAM / "E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
H100_FILE = UPSTREAM / "E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3.json"
MI308X_FILE = UPSTREAM / "E=128,N=384,device_name=AMD_Instinct_MI308X,dtype=fp8_w8a8,block_shape=[128,128].json"
MI308X = "gfx942:80:AMD Instinct MI308X:sramecc+,xnack-"
REVISION = "c25660aa607a816219ce18ce9b9bb64228174d60"


def test_every_batch_size_becomes_an_artifact_with_the_files_config_and_nothing_else() -> None:
    shipped = json.loads(H200_FILE.read_text())
    result = import_vllm_file(H200_FILE, revision=REVISION)
    assert result.refused == []
    assert sorted(a.key["M"] for a in result.artifacts) == sorted(int(m) for m in shipped)
    for artifact in result.artifacts:
        batch = artifact.key["M"]
        assert artifact.key == {"E": 128, "N": 384, "dtype": "fp8_w8a8", "block_n": 128, "block_k": 128, "down": False,
                                "M": batch}
        assert dict(artifact.winner.config) == shipped[str(batch)]
        assert [dict(c.config) for c in artifact.candidates] == [shipped[str(batch)]]
        assert artifact.selection.rule == "imported" and artifact.default is None
        assert artifact.winner.timing is None and all(c.timing is None for c in artifact.candidates)
        assert artifact.provenance.timing_protocol is None and artifact.provenance.created is None
        assert artifact.kernel.name == "vllm_fused_moe" and artifact.kernel.source_sha256 is None


def test_the_source_and_the_derivation_of_the_device_are_recorded() -> None:
    artifact = import_vllm_file(H200_FILE, revision=REVISION).artifacts[0]
    source = artifact.provenance.source
    assert source is not None
    assert source.project == "vllm-project/vllm"
    assert source.file == f"vllm/model_executor/layers/fused_moe/configs/{H200_FILE.name}"
    assert source.revision == REVISION
    assert source.url == (f"https://github.com/vllm-project/vllm/blob/{REVISION}/vllm/model_executor/layers/fused_moe/"
                          "configs/E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=%5B128,128%5D.json")
    assert source.entry == f'"{artifact.key["M"]}"'
    assert "device_name=NVIDIA_H200" in source.device_from and "'NVIDIA H200'" in source.device_from
    assert (artifact.device.vendor, artifact.device.arch, artifact.device.product, artifact.device.compute_units) == (
        "nvidia", "sm90", "NVIDIA H200", 132)
    assert import_vllm_file(H200_FILE).artifacts[0].provenance.source.url is None  # type: ignore[union-attr]


def test_the_rocm_file_keeps_each_entrys_own_launch_options() -> None:
    result = import_vllm_file(MI300X_FILE)
    by_batch = {a.key["M"]: dict(a.winner.config) for a in result.artifacts}
    assert set(by_batch) == {1, 1024, 8192}
    assert "waves_per_eu" not in by_batch[1] and by_batch[1]["SPLIT_K"] == 1
    assert by_batch[1024]["kpack"] == 2 and by_batch[1024]["matrix_instr_nonkdim"] == 16
    device = result.artifacts[0].device
    assert (device.arch, device.product, device.features) == ("gfx942", "AMD Instinct MI300X", ["sramecc+", "xnack-"])
    assert result.artifacts[0].key["dtype"] is None and result.artifacts[0].key["block_k"] is None


def test_validate_accepts_them_and_resolve_serves_them_for_their_device_and_key(tmp_path: Path) -> None:
    files = [str(MI300X_FILE), str(H200_FILE), str(H100_FILE)]
    assert main(["import", "vllm", *files, "--out", str(tmp_path / "imported"), "--revision", REVISION]) == 0
    assert sorted(p.name for p in (tmp_path / "imported").iterdir()) == ["gfx942", "sm90"]
    assert main(["validate", str(tmp_path / "imported")]) == 0
    resolver = Resolver(paths=[str(tmp_path / "imported")], detector=None)
    key = {"E": 128, "N": 384, "dtype": "fp8_w8a8", "block_n": 128, "block_k": 128, "down": False}
    shipped = json.loads(H200_FILE.read_text())
    exact = resolver.resolve("vllm_fused_moe", {**key, "M": 96}, device="H200")
    assert (exact.source, exact.key_match, exact.selection) == ("override", "exact", "imported")
    assert dict(exact.config) == shipped["96"]
    nearest = resolver.resolve("vllm_fused_moe", {**key, "M": 100}, device="H200")
    assert nearest.key_match == "nearest" and nearest.matched_key is not None and nearest.matched_key["M"] == 96
    rocm = resolver.resolve("vllm_fused_moe", {"E": 128, "N": 384, "dtype": None, "block_n": None, "block_k": None,
                                                "down": False, "M": 8192},
                            device="MI300X")
    assert dict(rocm.config) == json.loads(MI300X_FILE.read_text())["8192"]
    other = resolver.resolve("vllm_fused_moe", {**key, "M": 96}, device="MI300X")
    assert (other.source, dict(other.config)) == ("default", {})  # nothing imported: vLLM keeps its own choice


def test_an_entry_that_cannot_be_represented_is_refused_alone_naming_its_field(tmp_path: Path) -> None:
    data = json.loads(H200_FILE.read_text())
    data["sixty-four"] = data.pop("64")
    data["96"]["num_warps"] = "4"
    data["128"]["num_warps"] = 1024  # 32,768 threads a program: nothing launches it
    data["256"]["USE_TMA"] = 1
    data["512"]["BLOCK_SIZE_K"] = 256  # clamped to the block's 128 at launch, as vLLM does: imported
    data["triton_version"] = "3.4.0"
    bad = tmp_path / H200_FILE.name
    bad.write_text(json.dumps(data))
    result = import_vllm_file(bad)
    refused = {e.problems[0].field: e.problems[0].message for e in result.refused}
    assert set(refused) == {"sixty-four", "96", "128", "256"}
    assert "not a batch size" in refused["sixty-four"] and "num_warps='4' is not a non-negative int" in refused["96"]
    assert "more than 1024 threads a program" in refused["128"] and "USE_TMA=1 is not true or false" in refused["256"]
    assert all(str(bad) in str(e) for e in result.refused)
    assert len(result.artifacts) == len(data) - 1 - 4
    assert {a.provenance.backend_versions["triton"] for a in result.artifacts} == {"3.4.0"}


def test_a_file_that_cannot_be_imported_at_all_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    shutil.copy(MI300X_FILE, tmp_path / "E=128,N=384.json")
    with pytest.raises(ArtifactError) as info:
        import_vllm_file(tmp_path / "E=128,N=384.json")
    assert info.value.problems[0].field == "<file name>"
    unknown = tmp_path / MI308X_FILE.name.replace("MI308X", "MI999X")
    shutil.copy(MI308X_FILE, unknown)
    with pytest.raises(ArtifactError) as info:
        import_vllm_file(unknown)  # the catalog knows no MI999X
    assert info.value.problems[0].field == "<file name>.device_name" and info.value.file == str(unknown)


def test_the_triton_version_a_file_records_is_kept() -> None:
    result = import_vllm_file(H100_FILE)
    assert len(result.artifacts) == 18 and result.refused == []
    assert {a.provenance.backend_versions["triton"] for a in result.artifacts} == {"3.5.1"}
    assert result.artifacts[0].device.product == "NVIDIA H100 80GB HBM3"


def test_a_gpu_the_catalog_does_not_know_is_given_by_the_importer_and_said_to_be(tmp_path: Path,
                                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["import", "vllm", str(MI308X_FILE), "--out", str(out), "--device", MI308X, "--json",
                 "--artifacts"]) == 0
    report = json.loads(capsys.readouterr().out)
    written = [load_artifact(Path(row["to"])) for row in report["files"]]
    device = written[0].device
    assert (device.arch, device.product, device.compute_units, device.wave_size) == ("gfx942", "AMD Instinct MI308X",
                                                                                     80, 64)
    assert "as the import was told" in written[0].provenance.source.device_from  # type: ignore[union-attr]
    # vLLM ships this file with BLOCK_SIZE_K=256 for 128-wide quantization blocks in 12 of its 18
    # entries and launches them with BLOCK_SIZE_K 128: all 18 are imported, served as shipped.
    shipped = json.loads(MI308X_FILE.read_text())
    assert sorted(a.key["M"] for a in written) == sorted(int(m) for m in shipped) and report["refused"] == []
    assert sum(a.winner.config["BLOCK_SIZE_K"] == 256 for a in written) == 12
    assert main(["import", "vllm", str(MI308X_FILE), "--out", str(out), "--device", "gfx942"]) == 2


def test_the_file_name_is_parsed_as_vllm_writes_it_and_written_back() -> None:
    named = parse_file_name(H200_FILE.name)
    assert (named.decl.name, named.axes, named.device_name) == (
        "vllm_fused_moe", {"E": 128, "N": 384, "dtype": "fp8_w8a8", "block_n": 128, "block_k": 128, "down": False},
        "NVIDIA_H200")
    assert parse_file_name("E=8,N=14336,device_name=AMD_Instinct_MI300X,block_shape=[128,128].json").axes["dtype"] is None
    down = parse_file_name("E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128]_down.json")
    assert (down.axes["down"], down.device_name) == (True, "NVIDIA_H200")
    assert parse_file_name("E=8,N=64,device_name=NVIDIA_H200_down.json").axes == {
        "E": 8, "N": 64, "dtype": None, "block_n": None, "block_k": None, "down": True}
    flydsl = parse_file_name("E=384,N=256,device_name=AMD_Instinct_MI355X,dtype=int4_w4a16,backend=flydsl.json")
    assert (flydsl.decl.name, flydsl.axes) == ("vllm_flydsl_moe", {"E": 384, "N": 256, "dtype": "int4_w4a16"})
    for name in ("E=384,N=256,device_name=X,dtype=fp8_w8a8,backend=flydsl.json",
                 "E=384,N=256,device_name=X,dtype=int4_w4a16,backend=triton.json"):
        with pytest.raises(ArtifactError, match="backend"):
            parse_file_name(name)
    for name in (H200_FILE.name, MI300X_FILE.name, "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,"
                 "block_shape=[128,128]_down.json", "E=384,N=256,device_name=AMD_Instinct_MI355X,dtype=int4_w4a16,"
                 "backend=flydsl.json"):
        named = parse_file_name(name)
        assert vllm_file_name(named.decl.name, named.device_name, named.axes) == name


def test_a_file_imports_as_one_table_whose_rows_are_its_entries_in_order(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from flyconfigs.schema.load import load_table

    capsys.readouterr()
    assert main(["import", "vllm", str(H200_FILE), str(MI300X_FILE), "--out", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    tables = {Path(r["from"]).name: load_table(r["to"]) for r in report["files"] if r["entry"].startswith("table")}
    h200 = tables[H200_FILE.name]
    shipped = json.loads(H200_FILE.read_text())
    assert h200.entries == [f'"{m}"' for m in shipped] and len(list((tmp_path / "sm90").iterdir())) == 1
    per_entry = import_vllm_file(H200_FILE).artifacts
    for index, artifact in enumerate(per_entry):  # each row means what the entry's artifact means
        assert Artifact.model_validate(h200.row_artifact_data(index)) == artifact
    # The MI300X file's "1" sets no ROCm launch options, unlike its other two: it stays an artifact.
    assert [r["entry"] for r in report["files"] if Path(r["from"]) == MI300X_FILE] == ['"1"', "table of 2 rows"]
    mi300x = tables[MI300X_FILE.name]
    assert mi300x.key_of(0)["dtype"] is None and mi300x.key_of(0)["block_n"] is None  # null key cells
    assert main(["validate", str(tmp_path)]) == 0
