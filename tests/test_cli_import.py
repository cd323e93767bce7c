"""``flyconfigs import vllm|aiter|flydsl``: what it writes where, what it reports, and the
older ``flyconfigs flydsl import`` spelling, which does the same as ``import flydsl``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from factories import MI300X, make_artifact
from flyconfigs.cli import main
from flyconfigs.schema.flydsl import write_flydsl

UPSTREAM = Path(__file__).parent / "data" / "upstream"
MI300X_FILE = UPSTREAM / "vllm" / "E=128,N=384,device_name=AMD_Instinct_MI300X.json"


def test_import_flydsl_and_the_older_flydsl_import_write_the_same_artifacts(tmp_path: Path) -> None:
    write_flydsl(make_artifact(device=MI300X), tmp_path / "fly")
    assert main(["import", "flydsl", str(tmp_path / "fly"), "--out", str(tmp_path / "new")]) == 0
    assert main(["flydsl", "import", str(tmp_path / "fly"), "--out", str(tmp_path / "old")]) == 0
    new, old = sorted((tmp_path / "new").iterdir()), sorted((tmp_path / "old").iterdir())
    assert len(new) == 1 and [p.name for p in new] == [p.name for p in old]
    assert new[0].read_bytes() == old[0].read_bytes()


def test_import_reports_every_file_and_entry_it_wrote_and_refused_as_json(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(MI300X_FILE.read_text())
    data["1"]["num_warps"] = 3
    bad = tmp_path / "bad" / MI300X_FILE.name
    bad.parent.mkdir()
    bad.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["import", "vllm", str(bad), "--out", str(tmp_path / "out"), "--json", "--artifacts"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["command"] == "import vllm"
    assert report["refused"] == [{"file": str(bad), "field": "1",
                                  "message": "vllm_fused_moe cannot serve it: num_warps=3 is not a power of two"}]
    assert sorted(row["entry"] for row in report["files"]) == ['"1024"', '"8192"']
    assert all(Path(row["to"]).parent == tmp_path / "out" / "gfx942" for row in report["files"])


def test_a_file_that_cannot_be_imported_is_one_line_with_its_field_and_exit_1(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(MI300X_FILE, tmp_path / "configs.json")
    assert main(["import", "vllm", str(tmp_path / "configs.json"), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"refused: {tmp_path / 'configs.json'}: <file name>: is not E=" in err
    assert main(["import", "aiter", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "out")]) == 2


def test_two_aiter_files_with_another_config_for_one_key_are_two_tables(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    csv = UPSTREAM / "aiter" / "a8w8_bpreshuffle_tuned_gemm.csv"
    lines = csv.read_text().splitlines(keepends=True)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "a8w8_bpreshuffle_tuned_gemm.csv").write_text(lines[0] + lines[1])
    (tmp_path / "b" / "dsv3_a8w8_bpreshuffle_tuned_gemm.csv").write_text(lines[0] + lines[1].replace(",asm,0,8,",
                                                                                                       ",asm,0,4,"))
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["import", "aiter", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)["tables"]
    assert len(tables) == 2 and len({row["to"] for row in tables}) == 2
    splits = {json.loads(Path(row["to"]).read_text())["rows"][0][7] for row in tables}
    assert splits == {8, 4}


def test_an_import_never_replaces_a_measured_artifact_of_the_same_slot(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from flyconfigs.adapters.vllm import import_vllm_file

    imported = import_vllm_file(MI300X_FILE).artifacts[0]
    measured = make_artifact(kernel="vllm_fused_moe", device=imported.device.model_dump(mode="json"),
                             key=dict(imported.key))
    target = tmp_path / "out" / "gfx942" / measured.file_name()
    assert target.name == imported.file_name()
    target.parent.mkdir(parents=True)
    target.write_bytes(measured.to_json_bytes())
    capsys.readouterr()
    assert main(["import", "vllm", str(MI300X_FILE), "--out", str(tmp_path / "out"), "--json", "--artifacts"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert len(report["files"]) == 2 and len(report["refused"]) == 1
    assert "holds a measured artifact" in report["refused"][0]["message"]
    assert target.read_bytes() == measured.to_json_bytes()
    # As a table (the default: "1024" and "8192" set one set of tunables, "1" another and
    # stays an artifact), the table's other rows are written and the measured slot's left out.
    row = import_vllm_file(MI300X_FILE).artifacts[1]
    measured = make_artifact(kernel="vllm_fused_moe", device=row.device.model_dump(mode="json"), key=dict(row.key))
    (tmp_path / "out" / "gfx942" / row.file_name()).write_bytes(measured.to_json_bytes())
    assert main(["import", "vllm", str(MI300X_FILE), "--out", str(tmp_path / "out"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    shadowed = [r for r in report["refused"] if "an import never shadows it" in r["message"]]
    assert [r["field"] for r in shadowed] == [row.provenance.source.entry]  # type: ignore[union-attr]
    assert [r["entry"] for r in report["files"] if r["entry"].startswith("table")] == ["table of 1 row"]


def test_import_aiter_records_the_revision_and_the_folder_the_file_has_upstream(tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture[str]) -> None:
    csv = UPSTREAM / "aiter" / "a8w8_bpreshuffle_tuned_gemm.csv"
    model_file = tmp_path / "dsv3_a8w8_bpreshuffle_tuned_gemm.csv"
    model_file.write_text("".join(csv.read_text().splitlines(keepends=True)[:2]))
    capsys.readouterr()
    assert main(["import", "aiter", str(model_file), "--out", str(tmp_path / "out"), "--revision", "abc123",
                 "--upstream-dir", "aiter/configs/model_configs", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["tables"]
    table = json.loads(Path(row["to"]).read_text())
    source = table["provenance"]["source"]
    assert source["file"] == "aiter/configs/model_configs/dsv3_a8w8_bpreshuffle_tuned_gemm.csv"
    assert source["url"] == ("https://github.com/ROCm/aiter/blob/abc123/aiter/configs/model_configs/"
                             "dsv3_a8w8_bpreshuffle_tuned_gemm.csv")
    assert source["revision"] == "abc123" and table["entries"] == ["line 2"] and row["rows"] == 1


def test_import_aiter_of_a_folder_takes_the_files_of_declared_families_and_refuses_a_named_other(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = UPSTREAM / "aiter" / "a8w8_bpreshuffle_tuned_gemm.csv"
    configs = tmp_path / "configs"
    configs.mkdir()
    shutil.copy(csv, configs / csv.name)
    (configs / "a8w8_bpreshuffle_untuned_gemm.csv").write_text("gfx,cu_num,M,N,K,q_dtype_w\n")
    (configs / "notes_tuned_gemm.csv").write_text("gfx,cu_num,M,N,K\n")
    assert main(["import", "aiter", str(configs), "--out", str(tmp_path / "out"), "--json"]) == 0
    assert {row["from"] for row in json.loads(capsys.readouterr().out)["tables"]} == {str(configs / csv.name)}
    assert main(["import", "aiter", str(configs / "notes_tuned_gemm.csv"), "--out", str(tmp_path / "out")]) == 1
    assert "not a tuned file aiter reads for a declared family" in capsys.readouterr().err


def test_import_aiter_of_a_folder_records_each_files_subfolder_upstream(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    configs = tmp_path / "configs"
    (configs / "model_configs").mkdir(parents=True)
    lines = (UPSTREAM / "aiter" / "a8w8_bpreshuffle_tuned_gemm.csv").read_text().splitlines(keepends=True)
    (configs / "a8w8_bpreshuffle_tuned_gemm.csv").write_text(lines[0] + lines[1])
    (configs / "model_configs" / "dsv3_a8w8_bpreshuffle_tuned_gemm.csv").write_text(lines[0] + lines[2])
    capsys.readouterr()
    assert main(["import", "aiter", str(configs), "--out", str(tmp_path / "out"), "--json"]) == 0
    files = {json.loads(Path(row["to"]).read_text())["provenance"]["source"]["file"]
             for row in json.loads(capsys.readouterr().out)["tables"]}
    assert files == {"aiter/configs/a8w8_bpreshuffle_tuned_gemm.csv",
                     "aiter/configs/model_configs/dsv3_a8w8_bpreshuffle_tuned_gemm.csv"}


@pytest.mark.parametrize("command, said", [(["import", "vllm"], "no vLLM config file (*.json) in "),
                                           (["import", "aiter"], "no aiter tuned CSV of a declared family in "),
                                           (["import", "flydsl"], "no *.json file in "),
                                           (["flydsl", "export"], "no *.json file in ")])
def test_a_folder_with_nothing_to_import_says_so_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             command: list[str], said: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "untuned_gemm.csv").write_text("M,N,K\n1,2,3\n")  # aiter's untuned shapes: left out
    capsys.readouterr()
    assert main([*command, str(tmp_path / "empty"), "--out", str(tmp_path / "out")]) == 1
    assert f"flyconfigs: error: {said}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
