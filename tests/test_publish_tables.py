"""A package folder may hold tables beside artifacts and a NOTICE: both are checked as the
loader reads them, listed in the manifest, shipped, and described in the README; a folder
of ``publish_all`` may name its target and distribution."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from flyconfigs.errors import PublishError
from flyconfigs.publish.build import publish_all
from flyconfigs.publish.contents import collect, describe
from flyconfigs.schema import write_atomic
from flyconfigs.schema.table import Table
from test_registry_tables import _single, _table
from test_schema_table import table_dict

NOTICE = "Configs from ROCm/aiter (MIT License, Copyright (c) Advanced Micro Devices, Inc.).\n"


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "aiter-gfx942"
    write_atomic(folder / "t.json", _table().to_json_bytes())
    write_atomic(folder / "a.json", _single(64, "from_a_file").to_json_bytes())
    (folder / "NOTICE").write_text(NOTICE)
    return folder


def test_a_folder_holds_tables_beside_artifacts_and_its_readme_says_where_they_came_from(tmp_path: Path) -> None:
    contents = collect(_folder(tmp_path), "gfx942")
    assert (len(contents.artifacts), len(contents.tables), contents.count) == (1, 1, 4)
    readme = describe("flyconfigs-aiter-gfx942", "gfx942", "1.0.0", contents)
    assert "`aiter_gemm_a8w8_blockscale` (family version 2): 4 keys — K: 7168; M: 1–64; N: 1536; cu_num: 304" in readme
    assert ("- ROCm/aiter: `aiter/configs/a8w8_blockscale_tuned_gemm.csv` at "
            "e4048607a535ace3a2b51ded31b1c8c2d45c0879") in readme
    assert "selection rules: imported" in readme and readme.rstrip().endswith(NOTICE.rstrip())


def test_a_table_of_another_target_or_twice_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    write_atomic(folder / "again.json", _table().to_json_bytes())
    with pytest.raises(PublishError, match="same kernel, device and upstream file"):
        collect(folder, "gfx942")
    (folder / "again.json").unlink()
    with pytest.raises(PublishError, match="not to target 'gfx950'"):
        collect(folder, "gfx950")
    data = table_dict(schema_version="1.99", colour="blue")
    write_atomic(folder / "newer.json", json.dumps(data).encode())
    with pytest.raises(PublishError, match="colour"):
        collect(folder, "gfx942")


@pytest.mark.slow
def test_publish_all_ships_tables_and_the_notice_under_the_folders_name_and_target(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "root")
    (folder / "VERSION").write_text("2026.12.7\n")
    (folder / "TARGET").write_text("gfx942\n")
    (folder / "NAME").write_text("flyconfigs-aiter-gfx942\n")
    (release,) = publish_all(tmp_path / "root", tmp_path / "dist")
    assert (release.distribution, release.version, release.artifacts) == ("flyconfigs-aiter-gfx942", "2026.12.7", 4)
    wheel = next(f for f in release.files if f.suffix == ".whl")
    with zipfile.ZipFile(wheel) as zf:
        module = "flyconfigs_data_flyconfigs_aiter_gfx942"
        manifest = json.loads(zf.read(f"{module}/manifest.json"))
        assert zf.read(f"{module}/NOTICE").decode() == NOTICE
        (listed,) = manifest["tables"]
        table = Table.model_validate_json(zf.read(f"{module}/{listed['file']}"))
        assert table == _table() and listed["rows"] == 3 and manifest["target"] == "gfx942"
        assert len(manifest["artifacts"]) == 1
