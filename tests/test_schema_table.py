"""The table form (schema 1.6): one document of many keyed rows of one kernel, device and
provenance, validated as a whole, canonical and hashed; each row means what one artifact
means; a newer minor's fields are ignored, a newer major refused."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from factories import MI300X
from flyconfigs.errors import ArtifactError, UnsupportedSchemaVersionError
from flyconfigs.schema import SCHEMA_VERSION, Artifact, parse_document
from flyconfigs.schema.json_schema import load_json_schema
from flyconfigs.schema.load import parse_artifact, parse_table
from flyconfigs.schema.table import Table, is_table_document


def table_dict(rows: list[list[Any]] | None = None, **changes: Any) -> dict[str, Any]:
    """A table of aiter's fp8 block-scale GEMM on an MI300X: key cu_num, M, N, K; config
    libtype, kernelId, splitK, kernelName; measurements us, tflops."""
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "form": "table",
        "kernel": {"name": "aiter_gemm_a8w8_blockscale", "version": 2, "source_sha256": None},
        "device": MI300X,
        "columns": {"key": ["cu_num", "M", "N", "K"], "config": ["libtype", "kernelId", "splitK", "kernelName"],
                    "measured": ["us", "tflops"]},
        "rows": rows if rows is not None else [
            [304, 1, 1536, 7168, "ck", 3, 0, "a8w8_blockscale_1x128x128_256x16x64", 8.1, 2.72],
            [304, 16, 1536, 7168, "ck", 5, 0, "a8w8_blockscale_1x128x128_256x16x128", 9.4, 37.4],
            [304, 32, 1536, 7168, "cktile", 12, 1, "a8w8_blockscale_cktile_32", None, 61.0],
        ],
        "entries": ["line 2", "line 3", "line 4"],
        "layout": ["gfx", "cu_num", "M", "N", "K", "libtype", "kernelId", "splitK", "us", "kernelName", "tflops"],
        "selection": {"rule": "imported"},
        "provenance": {
            "tool": "flyconfigs import aiter", "backend": "aiter",
            "source": {"project": "ROCm/aiter", "file": "aiter/configs/a8w8_blockscale_tuned_gemm.csv",
                       "revision": "e4048607a535ace3a2b51ded31b1c8c2d45c0879",
                       "device_from": "gfx=gfx942 and cu_num=304"},
        },
    }
    data.update(changes)
    return data


def _problems(data: Any) -> dict[str, str]:
    with pytest.raises(ArtifactError) as err:
        parse_table(data, "t.json")
    assert err.value.file == "t.json"
    return {p.field: p.message for p in err.value.problems}


def test_a_table_is_canonical_hashed_and_reads_back_equal() -> None:
    table, report = parse_table(table_dict())
    raw = table.to_json_bytes()
    assert raw.endswith(b"\n") and json.loads(raw)["form"] == "table"
    again, _ = parse_table(parse_document(raw))
    assert again == table and again.to_json_bytes() == raw and again.content_hash() == table.content_hash()
    assert report.ignored_fields == () and is_table_document(json.loads(raw))
    reordered = dict(reversed(list(table_dict().items())))
    assert parse_table(reordered)[0].to_json_bytes() == raw  # key order never changes the bytes
    other = table_dict()
    other["rows"][0][-1] = 2.73
    assert parse_table(other)[0].content_hash() != table.content_hash()


def test_each_row_is_one_artifact_with_its_entry_and_measurements() -> None:
    table, _ = parse_table(table_dict())
    artifact = Artifact.model_validate(table.row_artifact_data(2))
    assert artifact.key == {"cu_num": 304, "M": 32, "N": 1536, "K": 7168}
    assert artifact.winner.config == {"libtype": "cktile", "kernelId": 12, "splitK": 1,
                                      "kernelName": "a8w8_blockscale_cktile_32"}
    assert artifact.selection.rule == "imported" and artifact.device == table.device
    source = artifact.provenance.source
    assert source is not None and source.entry == "line 4"
    assert source.reported == {"tflops": 61.0}  # a null measurement is none
    assert table.measured_of(0) == {"us": 8.1, "tflops": 2.72}


@pytest.mark.parametrize(("change", "field", "words"), [
    (lambda d: d["rows"][1].pop(), "rows.1", "9 cells, the columns name 10"),
    (lambda d: d["rows"].append(list(d["rows"][0])), "rows.3", "the same key as rows[0]"),
    (lambda d: d["columns"]["measured"].append("M"), "columns", "M named twice"),
    (lambda d: d["entries"].pop(), "entries", "2 entries for 3 rows"),
    (lambda d: d.update(schema_version="1.5"), "schema_version", "begins with 1.6"),
    (lambda d: d.update(rows=[], entries=[]), "", "at least one row"),
    (lambda d: d["rows"][0].__setitem__(5, 3.0), "rows.0.5", ""),  # still a row: the kernel says what a cell takes
    (lambda d: d["rows"][0].__setitem__(5, [1, 2]), "rows.0.5", "a cell is a bool, a 64-bit int"),
    (lambda d: d["rows"][0].__setitem__(5, 2**70), "rows.0.5", "a cell is a bool, a 64-bit int"),
    (lambda d: d["rows"][0].__setitem__(7, "x" * 1025), "rows.0.7", "a cell is a bool, a 64-bit int"),
    (lambda d: d.update(selection={"rule": "beat-default-beyond-noise"}), "provenance.source", "imported selection"),
    # The spelling (1.8) speaks of the table's own entries only, and only from 1.8.
    (lambda d: d.update(schema_version="1.7", spelling={"format": "csv"}), "spelling", "begins with schema 1.8"),
    (lambda d: d.update(spelling={"format": "csv", "texts": {"line 9": "x\n"}}), "", "'line 9' is no entry"),
    (lambda d: d.update(spelling={"format": "csv", "unserved": [{"entry": "line 2", "text": "x\n", "why": "y"}]}), "",
     "'line 2' is a row of the table"),
    (lambda d: d.update(spelling={"format": "json"}), "spelling", "names its indent"),
    (lambda d: d.update(spelling={"format": "json", "indent": 4, "order": ['"1"']}), "", "every row's entry"),
])
def test_a_broken_table_is_refused_naming_the_field(change: Any, field: str, words: str) -> None:
    data = table_dict()
    change(data)
    if field == "rows.0.5" and not words:
        assert parse_table(data)[0].rows[0][5] == 3.0
        return
    problems = _problems(data)
    assert any(f.replace("[", ".").replace("]", "").startswith(field.replace("[", ".").replace("]", "")) and words in m
               for f, m in problems.items()), problems


def test_newer_minor_fields_are_ignored_and_a_newer_major_refused() -> None:
    data = table_dict(schema_version="1.99", colour="blue")
    data["provenance"] = {**data["provenance"], "weather": "fine"}
    table, report = parse_table(data)
    assert sorted(report.ignored_fields) == ["colour", "provenance.weather"] and len(table.rows) == 3
    with pytest.raises(UnsupportedSchemaVersionError):
        parse_table(table_dict(schema_version="2.0"))


def test_an_artifact_reader_refuses_a_table_by_its_form() -> None:
    with pytest.raises(ArtifactError) as err:
        parse_artifact(table_dict(), "t.json")
    assert [p.field for p in err.value.problems] == ["form"]


def test_the_json_schema_of_tables_takes_a_table_and_refuses_a_bad_one() -> None:
    validator = jsonschema.Draft202012Validator(load_json_schema("table"))
    validator.validate(json.loads(Table.model_validate(table_dict()).to_json_bytes()))
    bad = copy.deepcopy(table_dict())
    bad["form"] = "artifact"
    assert list(validator.iter_errors(bad))
    bad = table_dict()
    bad["rows"][0].append({"nested": 1})
    assert list(validator.iter_errors(bad))


def test_the_file_name_is_stable_and_names_kernel_and_arch() -> None:
    table = Table.model_validate(table_dict())
    name = table.file_name()
    assert name.startswith("aiter_gemm_a8w8_blockscale-gfx942-table-") and name.endswith(".json")
    assert Table.model_validate(table_dict(rows=[[304, 2, 1, 1, "ck", 1, 0, "k", None, None]], entries=None)).file_name() == name


def test_keys_equal_in_python_but_not_in_json_are_two_rows() -> None:
    rows = [[304, 1, 1536, 7168, "ck", 3, 0, "a", None, None], [304, True, 1536, 7168, "ck", 3, 0, "b", None, None],
            [304, 1.0, 1536, 7168, "ck", 3, 0, "c", None, None]]
    assert len(parse_table(table_dict(rows=rows, entries=None))[0].rows) == 3
    with pytest.raises(ArtifactError, match="the same key as rows"):
        parse_table(table_dict(rows=[*rows, rows[1]], entries=None))
