"""The library reports the command line renders: ``write_imports`` (one write policy for
every importer), ``validate_path`` and ``doctor``, read as objects."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aiter_corpus import CORPUS
from conftest import SiteDir
from factories import MI300X, artifact_dict, make_artifact
from flyconfigs.adapters.importing import ImportReport, Refusal, write_imports
from flyconfigs.registry import Resolver, doctor, parse_device_spec, validate_path
from flyconfigs.schema import Artifact
from flyconfigs.schema.flydsl import write_flydsl
from flyconfigs.schema.load import parse_table
from flyconfigs.schema.models import artifact_file_name

UPSTREAM = Path(__file__).parent / "data" / "upstream"
VLLM_FILE = UPSTREAM / "vllm" / "E=128,N=384,device_name=AMD_Instinct_MI300X.json"
A8W8 = CORPUS / "aiter" / "configs" / "a8w8_tuned_gemm.csv"


def _aiter_csv(folder: Path) -> Path:
    lines = A8W8.read_text().splitlines()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / A8W8.name
    path.write_text("\n".join([lines[0], *[x for x in lines[1:] if x.startswith("gfx942,80,")][:3]]) + "\n")
    return path


def _flydsl_file(folder: Path) -> Path:
    return write_flydsl(make_artifact(device=MI300X, kernel="flydsl.acme_norm"), folder)


def test_a_small_vllm_import_reports_each_file_written_with_its_kernel_device_and_rows(tmp_path: Path) -> None:
    report = write_imports("vllm", [VLLM_FILE], tmp_path / "out")
    assert isinstance(report, ImportReport) and report.format == "vllm" and report.ok
    assert report.files == (VLLM_FILE,) and report.refused == () and report.upstream == ()
    # "1024" and "8192" set one set of tunables and make the table; "1" sets another and
    # stays an artifact beside it.
    artifact, table = sorted(report.written, key=lambda w: w.rows or 0)
    assert (artifact.source, artifact.entry, artifact.rows) == (VLLM_FILE, '"1"', None)
    assert (table.source, table.entry, table.rows) == (VLLM_FILE, "", 2) and report.rows == 2
    assert {w.kernel for w in report.written} == {"vllm_fused_moe"}
    assert {w.path.parent for w in report.written} == {tmp_path / "out" / "gfx942"}
    assert all(w.path.is_file() and w.device.startswith("gfx942") for w in report.written)


def _measured_in_the_way(report: ImportReport) -> Path:
    """A measured artifact written where the first row of the report's table (or its one
    artifact) has its slot: the file a second import must not replace or shadow."""
    (written,) = report.written
    if written.rows is None:
        target = written.path
        slot = Artifact.model_validate_json(target.read_bytes())
    else:
        table = parse_table(json.loads(written.path.read_bytes()), str(written.path))[0]
        target = written.path.parent / artifact_file_name(table.kernel.name, table.device.identity, table.key_of(0))
        slot = Artifact.model_validate(table.row_artifact_data(0))
    measured = make_artifact(kernel=slot.kernel.name, device=slot.device.model_dump(mode="json"), key=dict(slot.key))
    target.write_bytes(measured.to_json_bytes())
    return target


@pytest.mark.parametrize("kind", ["vllm", "aiter", "flydsl"])
def test_an_import_never_replaces_or_shadows_a_measured_slot_in_every_format(tmp_path: Path, kind: str) -> None:
    source = {"vllm": lambda: tmp_path / "in" / VLLM_FILE.name, "aiter": lambda: _aiter_csv(tmp_path / "in"),
              "flydsl": lambda: _flydsl_file(tmp_path / "in")}[kind]()
    if kind == "vllm":
        source.parent.mkdir()
        # Only the two rows of one set of tunables: one table, nothing beside it.
        data = json.loads(VLLM_FILE.read_text())
        source.write_text(json.dumps({m: c for m, c in data.items() if m != "1"}))
    out = tmp_path / "out"
    first = write_imports(kind, [source], out)  # type: ignore[arg-type]
    assert first.ok, first.refused
    in_the_way = _measured_in_the_way(first)
    before = in_the_way.read_bytes()
    again = write_imports(kind, [source], out)  # type: ignore[arg-type]
    assert not again.ok and in_the_way.read_bytes() == before
    (refusal,) = again.refused
    assert isinstance(refusal, Refusal) and refusal.file == source
    assert refusal.message.startswith(f"{in_the_way}: holds a measured artifact for the same kernel, device and key")
    if kind == "flydsl":
        assert refusal.field == "" and again.written == ()
    else:  # the table is written without the row: an import never shadows it
        (table,) = again.written
        assert refusal.field and "an import never shadows it (row not written)" in refusal.message
        assert table.rows == first.written[0].rows - 1  # type: ignore[operator]


def test_a_second_document_for_one_file_in_one_import_is_refused_in_every_format(tmp_path: Path) -> None:
    # Two FlyDSL files of one slot with other configs: the first is written, the second
    # refused by name, as two aiter files of one table are.
    one = _flydsl_file(tmp_path / "a")
    data = json.loads(one.read_text())
    data["config"] = {**data["config"], "threads": 512 if data["config"].get("threads") != 512 else 256}
    (tmp_path / "b").mkdir()
    two = tmp_path / "b" / one.name
    two.write_text(json.dumps(data))
    report = write_imports("flydsl", [one, two], tmp_path / "out")
    assert [w.source for w in report.written] == [one]
    (refusal,) = report.refused
    assert refusal.file == two and "the same kernel, device and key as" in refusal.message
    assert json.loads(report.written[0].path.read_text())["winner"]["config"] != data["config"]


def test_a_missing_path_raises_before_anything_is_written(tmp_path: Path) -> None:
    shutil.copy(VLLM_FILE, tmp_path / VLLM_FILE.name)
    with pytest.raises(FileNotFoundError):
        write_imports("vllm", [tmp_path / VLLM_FILE.name, tmp_path / "missing"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _unservable(folder: Path) -> Path:
    bad = {"threads": 0, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0}
    data = artifact_dict()
    data["candidates"][0]["config"] = bad
    data["winner"]["config"] = bad
    artifact = Artifact.model_validate(data)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / artifact.file_name()
    path.write_bytes(artifact.to_json_bytes())
    return path


def test_validate_path_names_the_file_and_the_field_of_each_problem(tmp_path: Path) -> None:
    bad_config = _unservable(tmp_path / "a")
    data = artifact_dict()
    data["device"]["compute_units"] = "132"
    bad_type = tmp_path / "b" / "typed.json"
    bad_type.parent.mkdir()
    bad_type.write_text(json.dumps(data))
    good = tmp_path / "c" / "good.json"
    good.parent.mkdir()
    good.write_bytes(make_artifact().to_json_bytes())
    report = validate_path(tmp_path / "a", bad_type, good)
    assert [f.file for f in report.files] == [bad_config, bad_type, good]
    assert report.invalid == 2 and not report.ok
    first, second, third = report.files
    assert [p.field for p in first.problems] == ["winner.config"] and "threads=0" in first.problems[0].message
    assert [p.field for p in second.problems] == ["device.compute_units"] and not second.valid
    assert third.valid and third.problems == ()
    assert validate_path(good).ok
    with pytest.raises(FileNotFoundError):
        validate_path(tmp_path / "missing.json")


def test_doctor_reports_bad_data_with_its_file_and_the_device_it_was_given(site: SiteDir, tmp_path: Path) -> None:
    bad = _unservable(tmp_path / "tuned")
    h200 = parse_device_spec("sm90:132:NVIDIA H200")
    resolver = Resolver([str(tmp_path / "tuned")], detector=None, packages=False)
    report = doctor(h200, resolver)
    assert report.device == h200 and report.device_source == "given by the caller"
    assert [(p.kind, p.where) for p in report.problems] == [("invalid-config", str(bad))]
    assert not report.ok and report.errors == () and report.collisions == () and report.predicted == ()
    assert report.warnings == ()  # the folder serves sm90
    clean = doctor(parse_device_spec("gfx942:304:AMD Instinct MI300X"), Resolver([], detector=None, packages=False))
    assert clean.ok and clean.problems == ()
    assert clean.warnings == ("nothing installed serves gfx942: every call gets the default heuristic",)
