"""``validate`` and ``doctor`` judge a table a column at a time (no artifact per row), and
report exactly what judging each row as an artifact reports: for any rows, bad keys and
bad configs among them, the same problems at the same rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from factories import H200
from flyconfigs.registry.checks.check import check_entries, check_table
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.families.loaded import RECORDS
from flyconfigs.registry.sources.entries import Source
from flyconfigs.registry.sources.tables import TableRef
from flyconfigs.schema.table import Table

GOOD = [256, 1, 8, "reg", 0]
CONFIGS = [GOOD, [256, 1, 4, "reg", 0], [1024, 1, 16, "smem", 0], [256, 1, 8, "banana", 0], [7, 1, 8, "reg", 0],
           [256, True, 8, "reg", 0]]


def _table(rows: list[list[Any]], backend: str = "nvidia") -> Table:
    return Table.model_validate({
        "schema_version": "1.6", "form": "table",
        "kernel": {"name": "rmsnorm", "version": RECORDS.record("rmsnorm").decl.version, "source_sha256": None},
        "device": H200,
        "columns": {"key": ["M", "N", "dtype", "weight_dtype"],
                    "config": ["threads", "rows_per_block", "vector_bytes", "row_storage", "occupancy"]},
        "rows": rows, "selection": {"rule": "beat-default-beyond-noise"},
        "provenance": {"tool": "test", "backend": backend},
    })


def _ref(table: Table) -> TableRef:
    return TableRef(table.kernel.name, table.device.identity, "t.json", Source("override", ".", (0, 0)),
                    rows=len(table.rows), table=table)


def _problems(table: Table, by_row: bool) -> list[tuple[str, str, str]]:
    log = ProblemLog()
    ref = _ref(table)
    if by_row:
        check_entries(ref.entries(log), log)
    else:
        check_table(ref, log)
    return sorted((p.kind, p.where, p.message) for p in log.problems())


_ROW = st.tuples(st.sampled_from([1, 64, 4096, -3, 0]), st.sampled_from([1024, 8192, 3000, 1 << 20]),
                 st.sampled_from([("bf16", "bf16"), ("bf16", "fp32"), ("fp32", "bf16")]),
                 st.integers(0, len(CONFIGS) - 1))


@settings(max_examples=60, deadline=None)
@given(st.lists(_ROW, min_size=1, max_size=12, unique_by=lambda r: (r[0], r[1], r[2])))
def test_a_table_checked_a_column_at_a_time_reports_what_its_rows_as_artifacts_report(
        rows: list[tuple[int, int, tuple[str, str], int]]) -> None:
    table = _table([[m, n, dtype, weight, *CONFIGS[c]] for m, n, (dtype, weight), c in rows])
    assert _problems(table, by_row=False) == _problems(table, by_row=True)


def test_a_test_doubles_table_is_reported_once_not_per_row() -> None:
    table = _table([[m, 1024, "bf16", "bf16", *GOOD] for m in range(1, 50)], backend="simulated")
    found = _problems(table, by_row=False)
    assert [kind for kind, _, _ in found] == ["test-double"]


def test_a_large_table_is_checked_without_an_artifact_per_row(tmp_path: Path) -> None:
    table = _table([[m, 1024, "bf16", "bf16", *GOOD] for m in range(1, 3000)] + [[3000, 1024, "bf16", "bf16", 7, 1,
                                                                                    8, "reg", 0]])
    ref = _ref(table)
    log = ProblemLog()
    check_table(ref, log)
    assert [(p.kind, p.where) for p in log.problems()] == [("invalid-config", "t.json#row 2999")]
    assert ref._entries is None and not ref._made  # no row became an entry


def test_validate_finds_a_duplicate_key_when_one_copy_is_a_table_row(tmp_path: Path, capsys: Any) -> None:
    # The copy that does not serve (here the row: the table says no time it was made) is
    # reported as the table file's problem at its row.
    import json

    from factories import artifact_dict
    from flyconfigs.cli import main
    from flyconfigs.schema import canonical_bytes, write_atomic

    key = {"M": 64, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
    write_atomic(tmp_path / "table.json", _table([[64, 8192, "bf16", "bf16", *GOOD],
                                                  [128, 8192, "bf16", "bf16", *GOOD]]).to_json_bytes())
    single = artifact_dict(key=key)
    (tmp_path / "single.json").write_bytes(canonical_bytes(single))
    assert main(["validate", str(tmp_path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    problems = {Path(f["file"]).name: f["problems"] for f in report["files"]}
    reported = [name for name, found in problems.items() if any("duplicate" in p["message"] for p in found)]
    assert reported == ["table.json"] and problems["table.json"][0]["field"] == "row 0", problems
    assert all(not found for name, found in problems.items() if name not in reported), problems
