"""``flyconfigs export aiter`` gives aiter's own CSVs back: import -> (publish -> install)
-> export returns every upstream row, as aiter reads them, in each file's column order,
at each file's path, with the AITER_CONFIG_* settings that read them.  The committed
package folders (imported/aiter-<arch>) are what the import of the committed corpus makes."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from aiter_corpus import CORPUS, REVISION, ROOT, compare, tuned_files, upstream_path
from conftest import SiteDir
from flyconfigs.adapters.aiter import import_aiter_file
from flyconfigs.cli import main
from flyconfigs.publish.build import publish_all
from flyconfigs.schema import write_atomic

SOME = ("aiter/configs/a8w8_bpreshuffle_tuned_gemm.csv", "aiter/configs/model_configs/dsv4_fp8fp4_tuned_fmoe.csv",
        "aiter/configs/model_configs/mimo_v2_5_pro_tuned_fmoe.csv", "aiter/ops/flydsl/chunk_gdn_h_tuned.csv")


def _export(out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    assert main(["export", "aiter", "--out", str(out), "--json"]) == 0
    report: dict[str, object] = json.loads(capsys.readouterr().out)
    return report


def test_an_import_on_the_path_exports_back_to_the_same_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "path"
    for rel in SOME:
        for table in import_aiter_file(CORPUS / rel, REVISION, upstream_dir=rel.rsplit("/", 1)[0]).tables:
            write_atomic(folder / table.file_name(), table.to_json_bytes())
    monkeypatch.setenv("FLYCONFIGS_PATH", str(folder))
    report = _export(tmp_path / "out", capsys)
    assert sorted(f["upstream"] for f in report["files"]) == sorted(SOME)  # type: ignore[index, union-attr]
    for rel in SOME:
        assert compare(CORPUS / rel, tmp_path / "out" / rel) == [], rel
    # A family's files are read together, the default file first, as aiter merges them.
    env = report["environment"]
    assert env["AITER_CONFIG_GEMM_A8W8_BPRESHUFFLE"] == str(tmp_path / "out" / SOME[0])  # type: ignore[index]
    assert env["AITER_CONFIG_FMOE"] == f"{tmp_path / 'out' / SOME[1]}:{tmp_path / 'out' / SOME[2]}"  # type: ignore[index]
    assert "AITER_CONFIG_GEMM_A8W8" not in env  # type: ignore[operator]


def test_an_export_of_nothing_says_so_and_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path))
    assert main(["export", "aiter", "--out", str(tmp_path / "out")]) == 1
    assert "no aiter table is installed or on FLYCONFIGS_PATH" in capsys.readouterr().err


@pytest.mark.slow
def test_the_whole_corpus_published_installed_and_exported_gives_back_every_row(
        site: SiteDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    releases = publish_all(ROOT / "imported", tmp_path / "dist")
    assert sorted(r.distribution for r in releases) == ["flyconfigs-aiter-gfx1250", "flyconfigs-aiter-gfx942",
                                                        "flyconfigs-aiter-gfx950"]
    for release in releases:
        with zipfile.ZipFile(next(f for f in release.files if f.suffix == ".whl")) as wheel:
            wheel.extractall(site.root)  # what an installer lays out
            assert any(n.endswith("/NOTICE") and b"MIT License" in wheel.read(n) for n in wheel.namelist())
    from flyconfigs.registry import default_resolver

    default_resolver().refresh()
    report = _export(tmp_path / "out", capsys)
    assert report["problems"] == []
    for path in tuned_files():
        exported = tmp_path / "out" / upstream_path(path)
        # Byte for byte, the row aiter never serves (tuned_grouped_fmoe.csv line 73) and the
        # header-only chunk_gdn_h_opt_tuned.csv (a kept table of no rows in each package) included.
        assert exported.read_bytes() == path.read_bytes(), path


@pytest.mark.slow
def test_the_committed_packages_are_the_import_of_the_committed_corpus(tmp_path: Path) -> None:
    made: dict[str, bytes] = {}
    for path in tuned_files():
        for table in import_aiter_file(path, REVISION, upstream_dir=upstream_path(path).rsplit("/", 1)[0]).tables:
            made[f"aiter-{table.device.arch}/{table.file_name()}"] = table.to_json_bytes()
    committed = {p.relative_to(ROOT / "imported").as_posix(): p.read_bytes()
                 for p in (ROOT / "imported").glob("*/*.json")}
    assert committed.keys() == made.keys() and committed == made
    for folder in (ROOT / "imported").glob("aiter-*"):
        assert (folder / "TARGET").read_text().strip() == folder.name.removeprefix("aiter-")
        assert (folder / "NAME").read_text().strip() == f"flyconfigs-{folder.name}"
        assert "MIT License" in (folder / "NOTICE").read_text() and REVISION in (folder / "NOTICE").read_text()


def test_a_file_on_the_path_that_cannot_be_read_exits_1_and_is_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "path"
    for table in import_aiter_file(CORPUS / SOME[0], REVISION, upstream_dir=SOME[0].rsplit("/", 1)[0]).tables:
        write_atomic(folder / table.file_name(), table.to_json_bytes())
    (folder / "broken.json").write_text("{")
    monkeypatch.setenv("FLYCONFIGS_PATH", str(folder))
    capsys.readouterr()
    assert main(["export", "aiter", "--out", str(tmp_path / "out"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [f["upstream"] for f in report["files"]] == [SOME[0]]
    assert len(report["problems"]) == 1 and "broken.json" in report["problems"][0], report["problems"]
    assert main(["export", "aiter", "--out", str(tmp_path / "text")]) == 1
    err = capsys.readouterr().err
    assert "flyconfigs: problem: " in err and "broken.json" in err, err
