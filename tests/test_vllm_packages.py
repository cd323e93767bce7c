"""The committed folders of the vLLM packages (artifacts/vllm-fused-moe-<target>/): every
entry of vLLM 0.34.0's files, labelled imported, each table naming its upstream
file and revision, one package per target under its own name with vLLM's Apache-2.0
licence in its NOTICE; rebuilt from the corpus, the same bytes."""

from __future__ import annotations

import filecmp
import json
import sys
from pathlib import Path

import pytest

from flyconfigs.adapters.vllm import CONFIG_DIR, PROJECT, parse_file_name
from flyconfigs.schema import load_artifact
from flyconfigs.schema.load import load_table
from flyconfigs.schema.table import is_table_document
from tests.vllm_corpus import CORPUS, config_files, vllm_table

ARTIFACTS = Path(__file__).parents[1] / "artifacts"
FOLDERS = sorted(ARTIFACTS.glob("vllm-fused-moe-*"))


def test_one_package_per_target_under_its_own_name_with_vllms_licence() -> None:
    assert [f.name.removeprefix("vllm-fused-moe-") for f in FOLDERS] == [
        "gfx1151", "gfx1201", "gfx942", "gfx950", "intel_gpu_bmg_g31", "sm100", "sm103", "sm120", "sm121", "sm80", "sm89",
        "sm90"]
    licence = (CORPUS / "LICENSE").read_text()
    for folder in FOLDERS:
        target = (folder / "TARGET").read_text().strip()
        assert folder.name == f"vllm-fused-moe-{target}"
        assert (folder / "NAME").read_text().strip() == f"flyconfigs-vllm-fused-moe-{target}"
        assert (folder / "VERSION").read_text().strip() == "0.34.0"
        notice = (folder / "NOTICE").read_text()
        assert "Apache License, Version 2.0" in notice and notice.endswith(licence) and PROJECT in notice


def test_every_entry_of_every_file_is_in_a_package_once_labelled_imported_with_its_source() -> None:
    served: dict[str, dict[str, object]] = {}
    for folder in FOLDERS:
        target = (folder / "TARGET").read_text().strip()
        for path in sorted(folder.glob("*.json")):
            data = json.loads(path.read_text())
            if is_table_document(data):
                table = load_table(path)
                rows = [table.row_artifact_data(i) for i in range(len(table.rows))]
                assert table.device.arch == target and table.selection.rule == "imported"
            else:
                rows = [json.loads(load_artifact(path).to_json_bytes())]
            for row in rows:
                source = row["provenance"]["source"]
                assert source["project"] == PROJECT and source["revision"] == "v0.34.0"
                assert source["url"].startswith(f"https://github.com/{PROJECT}/blob/v0.34.0/{CONFIG_DIR}/")
                entries = served.setdefault(source["file"].removeprefix(CONFIG_DIR + "/"), {})
                assert source["entry"] not in entries
                entries[source["entry"]] = row["winner"]["config"]
    expected = config_files()
    assert sorted(served) == sorted(p.name for p in expected)
    for path in expected:
        assert served[path.name] == {f'"{m}"': c for m, c in vllm_table(path).items()}, path.name
        parse_file_name(path.name)
    assert sum(len(e) for e in served.values()) == 6066


@pytest.mark.slow
def test_rebuilt_from_the_corpus_the_folders_are_the_same_bytes(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
    from vllm_packages import build

    built = build(CORPUS, tmp_path)
    assert [f.name for f in built] == [f.name for f in FOLDERS]
    for ours, committed in zip(built, FOLDERS, strict=True):
        names = sorted(p.name for p in committed.iterdir())
        assert sorted(p.name for p in ours.iterdir()) == names
        assert filecmp.cmpfiles(ours, committed, names, shallow=False)[0] == names
