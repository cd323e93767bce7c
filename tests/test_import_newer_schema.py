"""``import aiter`` and ``import vllm`` never write over a table or artifact of a newer
schema in ``--out`` (docs/cli.md's promise): this flyconfigs cannot tell what it would
drop, so the file is reported and left as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiter_corpus import CORPUS
from flyconfigs.cli import main

A8W8 = CORPUS / "aiter" / "configs" / "a8w8_tuned_gemm.csv"
VLLM = Path(__file__).resolve().parents[1] / "corpora" / "vllm-0.34.0" / "configs" / \
    "E=8,N=7168,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"


def _small_csv(tmp_path: Path) -> Path:
    lines = A8W8.read_text().splitlines()
    path = tmp_path / "in" / A8W8.name
    path.parent.mkdir()
    path.write_text("\n".join([lines[0], *[x for x in lines[1:] if x.startswith("gfx942,80,")][:3]]) + "\n")
    return path


@pytest.mark.parametrize("version", ["1.9", "1.10", "2.0"])
@pytest.mark.parametrize("command", ["aiter", "vllm"])
def test_a_newer_schemas_file_in_out_is_left_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       command: str, version: str) -> None:
    source = _small_csv(tmp_path) if command == "aiter" else VLLM
    out = tmp_path / "out"
    assert main(["import", command, str(source), "--out", str(out)]) == 0
    (written,) = [p for p in out.rglob("*.json")]
    newer = json.loads(written.read_text())
    newer["schema_version"] = version
    newer["a_field_of_the_future"] = {"kept": True}
    written.write_text(json.dumps(newer))
    before = written.read_bytes()
    capsys.readouterr()
    assert main(["import", command, str(source), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"schema {version}" in err and "newer than this flyconfigs reads" in err
    assert written.read_bytes() == before
