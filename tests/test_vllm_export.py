"""``flyconfigs export vllm``: what is installed or on FLYCONFIGS_PATH written back as vLLM's
own files, one per device and key group, named as vLLM names them; import -> export gives
back every upstream file equal as JSON (real vLLM 0.34.0 files), also through a published
and pip-installed package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flyconfigs.adapters.vllm import import_vllm_file, parse_file_name
from flyconfigs.adapters.vllm_export import vllm_files
from flyconfigs.cli import main
from flyconfigs.registry.core.products import find_product
from tests.vllm_corpus import CONFIGS, config_files

SAMPLE = ["E=128,N=384,device_name=NVIDIA_GB200,dtype=fp8_w8a8,block_shape=[128,128].json",
          "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128]_down.json",
          "E=384,N=256,device_name=AMD_Instinct_MI355X,dtype=int4_w4a16,backend=flydsl.json",
          "E=8,N=14336,device_name=AMD_Instinct_MI300X.json",
          "E=16,N=800,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json",
          "E=128,N=768,device_name=AMD_Instinct_MI308X.json"]


def _round_trip(files: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    imported = tmp_path / "imported"
    assert main(["import", "vllm", *map(str, files), "--out", str(imported), "--revision", "v0.34.0"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("FLYCONFIGS_PATH", str(imported))
    from flyconfigs.registry import refresh

    refresh()
    code = main(["export", "vllm", "--out", str(tmp_path / "exported"), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["skipped"] == []
    return report


def test_imported_files_export_back_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    report = _round_trip([CONFIGS / n for n in SAMPLE], tmp_path, monkeypatch, capsys)
    assert sorted(Path(p).name for p in report["files"]) == sorted(SAMPLE)  # type: ignore[attr-defined]
    for name in SAMPLE:
        # Each file came as one table with its spelling: its batch sizes in the upstream
        # order, by which vLLM breaks ties (out of order in the H100 file), the members a
        # down file's table left as artifacts in their places, its layout (the down file's
        # one-line members, the MI308X file's blank line) and its final newline or none.
        assert (tmp_path / "exported" / name).read_bytes() == (CONFIGS / name).read_bytes(), name


def test_nothing_to_export_is_said_and_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path / "empty"))
    from flyconfigs.registry import refresh

    refresh()
    assert main(["export", "vllm", "--out", str(tmp_path / "out")]) == 1
    assert "no vllm_fused_moe or vllm_flydsl_moe artifacts" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_h200_variant_exports_to_the_file_vllm_reads_for_it_and_the_first_source_wins() -> None:
    h200 = import_vllm_file(CONFIGS / "E=8,N=7168,device_name=NVIDIA_H200.json").artifacts
    nvl = find_product("H200 NVL")
    assert nvl is not None
    renamed = [a.model_copy(update={"device": nvl.device}) for a in h200]
    exported = vllm_files([(a, "nvl") for a in renamed] + [(a, "h200") for a in h200])
    # vLLM reads NVIDIA_H200 files on an H200 NVL: both land in one file, the first kept.
    assert list(exported.files) == ["E=8,N=7168,device_name=NVIDIA_H200.json"]
    assert len(exported.skipped) == len(h200) and all(s.startswith("h200: ") for s in exported.skipped)
    old = h200[0].model_copy(update={"kernel": h200[0].kernel.model_copy(update={"version": 1})})
    assert "version 1, not the 2 vLLM reads" in vllm_files([(old, "old")]).skipped[0]


@pytest.mark.slow
def test_the_whole_corpus_exports_back_equal_as_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    files = config_files()
    report = _round_trip(files, tmp_path, monkeypatch, capsys)
    assert len(report["files"]) == len(files) == 340  # type: ignore[arg-type]
    for path in files:
        assert json.loads((tmp_path / "exported" / path.name).read_text()) == json.loads(path.read_text()), path.name


@pytest.mark.slow
def test_the_committed_package_published_installed_and_exported_gives_back_every_file(tmp_path: Path) -> None:
    """The committed folder of flyconfigs-vllm-fused-moe-sm90 -> publish -> pip install
    into a fresh venv -> ``flyconfigs export vllm`` there gives back every sm90 file of the
    corpus, equal as JSON; the wheel carries the NOTICE with vLLM's licence."""
    import zipfile

    sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
    from local_index import build_core_wheel, dependency_wheels, fresh_venv

    sm90 = []
    for path in config_files():
        product = find_product(parse_file_name(path.name).device_name)
        if product is not None and product.device.arch == "sm90":
            sm90.append(path)
    folder = Path(__file__).parents[1] / "artifacts" / "vllm-fused-moe-sm90"
    assert main(["publish", str(folder), "--target", "sm90", "--version", "0.34.0",
                 "--name", "flyconfigs-vllm-fused-moe-sm90", "--out", str(tmp_path / "dist")]) == 0
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        notice = archive.read("flyconfigs_data_flyconfigs_vllm_fused_moe_sm90/NOTICE").decode()
    assert "Apache License" in notice and "vllm-project/vllm" in notice
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    dependency_wheels(wheels)
    build_core_wheel(Path(__file__).parents[1], wheels)
    python = fresh_venv(tmp_path / "venv")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--no-index", "--find-links",
                    str(wheels), "--find-links", str(tmp_path / "dist"), "flyconfigs-vllm-fused-moe-sm90"],
                   check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_") and k != "PYTHONPATH"}
    env["FLYCONFIGS_NO_GPU_DETECT"] = "1"
    done = subprocess.run([str(python), "-m", "flyconfigs", "export", "vllm", "--out", str(tmp_path / "exported")],
                          capture_output=True, text=True, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "exported").iterdir()) == sorted(p.name for p in sm90)
    for path in sm90:
        assert json.loads((tmp_path / "exported" / path.name).read_text()) == json.loads(path.read_text()), path.name


def test_a_file_on_the_path_that_cannot_be_read_is_a_problem_listed_and_exit_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    imported = tmp_path / "imported"
    assert main(["import", "vllm", str(CONFIGS / SAMPLE[3]), "--out", str(imported), "--revision", "v0.34.0"]) == 0
    (imported / "broken.json").write_text('{"kernel": "vllm_fused_moe')
    capsys.readouterr()
    monkeypatch.setenv("FLYCONFIGS_PATH", str(imported))
    from flyconfigs.registry import refresh

    refresh()
    assert main(["export", "vllm", "--out", str(tmp_path / "json"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [Path(p).name for p in report["files"]] == [SAMPLE[3]] and report["skipped"] == []
    assert len(report["problems"]) == 1 and "broken.json" in report["problems"][0], report["problems"]
    assert "Unterminated string starting at line 1" in report["problems"][0]
    refresh()
    assert main(["export", "vllm", "--out", str(tmp_path / "text")]) == 1
    err = capsys.readouterr().err
    assert "broken.json" in err and "1 problem" in err, err
