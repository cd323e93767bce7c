"""Configs straight from an upstream release: ``import vllm`` reads a vLLM wheel or an
installed vLLM and ``import aiter`` a checkout or a wheel, recording the version or commit
the release itself states; ``compare vllm`` says what changed between two releases, per
device and key."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from flyconfigs.adapters.upstream import aiter_tree, compare_vllm, vllm_tree
from flyconfigs.cli import main
from flyconfigs.schema.table import Table

ROOT = Path(__file__).resolve().parents[1]
VLLM_CONFIGS = ROOT / "corpora" / "vllm-0.34.0" / "configs"
AITER = ROOT / "corpora" / "aiter-e4048607" / "aiter"
PREFIX = "vllm/model_executor/layers/fused_moe/configs/"
H100_FILE = "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"
H200_FILE = "E=8,N=14336,device_name=NVIDIA_H200.json"
COMMIT = "e4048607a535ace3a2b51ded31b1c8c2d45c0879"


def _wheel(path: Path, version: str, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"vllm-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        archive.writestr("vllm/__init__.py", "")
        for name, data in files.items():
            archive.writestr(PREFIX + name, data)
    return path


def _tables(folder: Path) -> list[Table]:
    return [Table.model_validate_json(p.read_bytes()) for p in sorted(folder.rglob("*.json"))]


def test_import_vllm_reads_a_wheel_and_records_its_release(tmp_path: Path) -> None:
    files = {n: (VLLM_CONFIGS / n).read_bytes() for n in (H100_FILE, H200_FILE)}
    wheel = _wheel(tmp_path / "vllm-0.34.0-cp38-abi3-manylinux1_x86_64.whl", "0.34.0", files)
    assert main(["import", "vllm", str(wheel), "--out", str(tmp_path / "out")]) == 0
    tables = _tables(tmp_path / "out")
    assert len(tables) == 2
    for table in tables:
        source = table.provenance.source
        assert source is not None and source.revision == "v0.34.0" and source.file.startswith(PREFIX)
    with vllm_tree(wheel) as tree:
        assert tree.revision == "v0.34.0" and "METADATA" in tree.how
        unpacked = tree.folder
        assert sorted(p.name for p in unpacked.iterdir()) == sorted(files)
    assert not unpacked.exists()  # the unpacked files are removed


def test_an_installed_vllm_states_its_version_beside_it(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    configs = site / PREFIX
    configs.mkdir(parents=True)
    shutil.copy(VLLM_CONFIGS / H100_FILE, configs)
    (site / "vllm-0.35.1.dev7+g1a2b3c4d.dist-info").mkdir()
    (site / "vllm-0.35.1.dev7+g1a2b3c4d.dist-info" / "METADATA").write_text("Name: vllm\nVersion: 0.35.1.dev7+g1a2b3c4d\n")
    for given in (site, site / "vllm"):
        tree = vllm_tree(given)
        assert tree.folder == configs and tree.revision == "1a2b3c4d"
    (site / "vllm-0.35.1.dev7+g1a2b3c4d.dist-info" / "METADATA").unlink()
    (site / "vllm" / "_version.py").write_text("__version__ = version = '0.35.0'\n")
    assert vllm_tree(site).revision == "v0.35.0"


def test_import_aiter_reads_a_checkout_and_records_its_commit(tmp_path: Path) -> None:
    checkout = tmp_path / "aiter-src"
    (checkout / "aiter" / "configs").mkdir(parents=True)
    shutil.copy(AITER / "configs" / "a8w8_tuned_batched_gemm.csv", checkout / "aiter" / "configs")
    (checkout / ".git" / "refs" / "heads").mkdir(parents=True)
    (checkout / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (checkout / ".git" / "packed-refs").write_text(f"# pack-refs with: peeled\n{COMMIT} refs/heads/main\n")
    assert aiter_tree(checkout).revision == COMMIT
    assert main(["import", "aiter", str(checkout), "--out", str(tmp_path / "out")]) == 0
    tables = _tables(tmp_path / "out")
    assert tables and all(t.provenance.source is not None and t.provenance.source.revision == COMMIT
                          and t.provenance.source.file == "aiter/configs/a8w8_tuned_batched_gemm.csv" for t in tables)
    (checkout / ".git" / "refs" / "heads" / "main").write_text("0" * 40 + "\n")  # a loose ref beats packed-refs
    assert aiter_tree(checkout).revision == "0" * 40


def test_an_aiter_wheel_names_its_commit_in_its_version(tmp_path: Path) -> None:
    wheel = tmp_path / "amd_aiter-0.1.6+g4e5f6a7b-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("amd_aiter-0.1.6+g4e5f6a7b.dist-info/METADATA", "Name: amd-aiter\nVersion: 0.1.6+g4e5f6a7b\n")
        archive.write(AITER / "configs" / "a8w8_tuned_batched_gemm.csv", "aiter/configs/a8w8_tuned_batched_gemm.csv")
    with aiter_tree(wheel) as tree:
        assert tree.revision == "4e5f6a7b" and (tree.folder / "configs" / "a8w8_tuned_batched_gemm.csv").is_file()


def test_compare_vllm_says_what_an_upgrade_changes_per_device_and_key(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    h100 = json.loads((VLLM_CONFIGS / H100_FILE).read_text())
    newer = {k: v for k, v in h100.items() if k != "1"}  # batch size 1 dropped
    newer["64"] = {**h100["64"], "num_warps": 8}        # one config changed
    newer["12345"] = h100["64"]                         # one added
    old = _wheel(tmp_path / "vllm-0.34.0-py3-none-any.whl", "0.34.0",
                 {H100_FILE: json.dumps(h100).encode(), H200_FILE: (VLLM_CONFIGS / H200_FILE).read_bytes()})
    new = _wheel(tmp_path / "vllm-0.35.0-py3-none-any.whl", "0.35.0",
                 {H100_FILE: json.dumps(newer).encode(), H200_FILE: (VLLM_CONFIGS / H200_FILE).read_bytes()})
    assert main(["compare", "vllm", str(old), str(new), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["old"]["revision"] == "v0.34.0" and out["new"]["revision"] == "v0.35.0"
    assert out["counts"] == {"added": 1, "removed": 1, "changed": 1}
    assert [(c["device_name"], c["M"], c["kind"]) for c in out["changes"]] == [
        ("NVIDIA_H100_80GB_HBM3", 1, "removed"), ("NVIDIA_H100_80GB_HBM3", 64, "changed"),
        ("NVIDIA_H100_80GB_HBM3", 12345, "added")]
    assert out["changes"][1]["new"]["num_warps"] == 8 and out["changes"][1]["key"]["dtype"] == "fp8_w8a8"
    assert list(compare_vllm(VLLM_CONFIGS, VLLM_CONFIGS)) == []
    assert main(["compare", "vllm", str(old), str(new)]) == 0
    text = capsys.readouterr().out
    assert "NVIDIA_H100_80GB_HBM3 E=8 N=14336 dtype=fp8_w8a8" in text and "M=64:" in text
