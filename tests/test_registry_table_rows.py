"""A big table costs a search the rows it weighs: its keys are indexed when it is read, a
row becomes an entry only when a search matches it (or weighs it as a nearest-key
neighbour), and what is served is what serving each row as an artifact would serve —
precedence, contests and the typed keys included; a corrupt row of a big table is still
one clear error naming the file, the row and the cell."""

from __future__ import annotations

import gc
import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import SiteDir
from flyconfigs.errors import ArtifactError
from flyconfigs.registry import default_resolver
from flyconfigs.registry.core.collector import collector_paused
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.resolve import Resolver
from flyconfigs.registry.sources.entries import Source
from flyconfigs.registry.sources.tables import TableRef
from flyconfigs.schema import Artifact, write_atomic
from flyconfigs.schema.load import parse_table
from flyconfigs.schema.table import Table
from test_registry_tables import KERNEL, MI300X
from test_schema_table import table_dict

NS = (1536, 2048, 4096, 7168)
MS = tuple(range(1, 501))


def _big(kernel_name: str = "k") -> dict[str, Any]:
    """A table of 2,000 rows: every M of 1..500 at four Ns, each row's kernelName naming its key."""
    rows = [[304, m, n, 7168, "ck", m % 7, 0, f"{kernel_name}_{m}_{n}", 1.0 + m, None] for n in NS for m in MS]
    return table_dict(rows=rows, entries=[f"line {i + 2}" for i in range(len(rows))])


def _key(m: int, n: int = 1536) -> dict[str, int]:
    return {"cu_num": 304, "M": m, "N": n, "K": 7168}


def _ref(resolver: Resolver) -> TableRef:
    (ref,) = resolver._catalog.tables_for("gfx942")
    return ref


def test_an_exact_key_makes_an_entry_of_its_row_only(tmp_path: Path) -> None:
    write_atomic(tmp_path / "big.json", Table.model_validate(_big()).to_json_bytes())
    resolver = Resolver(paths=[str(tmp_path)], detector=None)
    served = resolver.resolve(KERNEL, _key(321, 4096), MI300X)
    assert served.key_match == "exact" and served.config["kernelName"] == "k_321_4096"
    row = NS.index(4096) * len(MS) + 320
    assert served.file == f"{tmp_path / 'big.json'}#line {row + 2}"
    assert sorted(_ref(resolver)._made) == [row]
    assert resolver.problems.problems() == []


def test_a_nearest_key_weighs_only_the_rows_that_share_its_exact_axes(tmp_path: Path) -> None:
    data = _big()
    data["rows"] = [r for r in data["rows"] if r[1] % 16 == 0]  # M = 16, 32, ... 496: a miss in between
    data["entries"] = None
    write_atomic(tmp_path / "big.json", Table.model_validate(data).to_json_bytes())
    resolver = Resolver(paths=[str(tmp_path)], detector=None)
    served = resolver.resolve(KERNEL, _key(100, 2048), MI300X)
    assert served.key_match == "nearest" and served.matched_key["N"] == 2048
    made = _ref(resolver)._made
    assert made and all(made[i].key["N"] == 2048 for i in made), "another N's rows were made entries"
    assert len(made) <= len(data["rows"]) // len(NS)


def test_rows_are_served_as_the_same_rows_as_artifacts_would_be(tmp_path: Path) -> None:
    """Every tried key (each tuned M, a neighbour, a miss) serves what the same rows
    written as single artifacts serve: a table changes how rows are kept, not what serves."""
    data = _big()
    data["rows"] = [r for r in data["rows"] if r[1] % 24 == 0 and r[2] in (1536, 4096)]
    data["entries"] = None
    table = Table.model_validate(data)
    write_atomic(tmp_path / "table" / "t.json", table.to_json_bytes())
    for index in range(len(table.rows)):
        artifact = Artifact.model_validate(table.row_artifact_data(index))
        write_atomic(tmp_path / "single" / f"{index}.json", artifact.to_json_bytes())
    as_table = Resolver(paths=[str(tmp_path / "table")], detector=None)
    as_files = Resolver(paths=[str(tmp_path / "single")], detector=None)
    for n in (1536, 2048, 4096):
        for m in (1, 23, 24, 25, 100, 240, 241, 480, 9000):
            a, b = as_table.resolve(KERNEL, _key(m, n), MI300X), as_files.resolve(KERNEL, _key(m, n), MI300X)
            assert (dict(a.config), a.key_match, dict(a.matched_key or {})) == (
                dict(b.config), b.key_match, dict(b.matched_key or {})), (m, n)


def test_within_one_folder_the_newer_of_a_row_and_an_artifact_of_one_key_serves(tmp_path: Path) -> None:
    data = Table.model_validate(_big()).row_artifact_data(0)
    data["winner"]["config"] = data["candidates"][0]["config"] = {**data["winner"]["config"], "kernelName": "single"}
    for made, expected in (("2020-01-01T00:00:00Z", "k_1_1536"), ("2999-01-01T00:00:00Z", "single")):
        folder = tmp_path / made[:4]
        data["provenance"]["created"] = made
        write_atomic(folder / "single.json", Artifact.model_validate(data).to_json_bytes())
        big = _big()
        big["provenance"] = {**big["provenance"], "created": "2500-01-01T00:00:00Z"}
        write_atomic(folder / "big.json", Table.model_validate(big).to_json_bytes())
        served = Resolver(paths=[str(folder)], detector=None).resolve(KERNEL, _key(1), MI300X)
        assert served.config["kernelName"] == expected, made


def test_two_third_party_tables_of_one_key_contest_it(site: SiteDir) -> None:
    site.install("gfx942", [], tables=[Table.model_validate(_big("aaa"))], name="aaa-tunings", module="aaa")
    site.install("gfx942", [], tables=[Table.model_validate(_big("zzz"))], name="zzz-tunings", module="zzz")
    served = default_resolver().resolve(KERNEL, _key(7), MI300X)
    assert served.source == "default"
    assert any("contested: " in r and "aaa-tunings" in r for r in served.reasons), served.reasons


def test_keys_equal_as_values_but_not_as_json_are_told_apart() -> None:
    rows = [[304, 1, 1536, 7168, "ck", 3, 0, "int", None, None],
            [304, True, 1536, 7168, "ck", 3, 0, "bool", None, None]]
    for table_rows, asked, want in (
            (rows, 1, 0), (rows, True, 1), (rows[:1], 1.0, None), (rows[:1], True, None), (rows[1:], 1, None)):
        ref = TableRef(KERNEL, MI300X, "t.json", Source("override", "t", (0, 0)),
                       table=Table.model_validate(table_dict(rows=table_rows, entries=None)))
        assert ref.read(ProblemLog()) is not None
        key = {**_key(1), "M": asked}
        assert ref.row_of(key, json.dumps(key, sort_keys=True, separators=(",", ":"))) == want, (table_rows, asked)


def test_a_corrupt_row_of_a_big_table_names_the_file_the_row_and_the_cell(tmp_path: Path) -> None:
    data = _big()
    data["rows"][1733][7] = {"nested": "object"}
    with pytest.raises(ArtifactError) as err:
        parse_table(data, "big.json")
    assert str(err.value).startswith("big.json: rows[1733][7]: a cell is a bool"), str(err.value)
    # Served from a folder: reported once, naming the file and the cell, and the call falls back.
    (tmp_path / "big.json").write_text(json.dumps(data, separators=(",", ":")))
    resolver = Resolver(paths=[str(tmp_path)], detector=None)
    assert resolver.resolve(KERNEL, _key(1), MI300X).source == "default"
    (problem,) = resolver.problems.problems()
    assert problem.kind == "invalid-artifact" and problem.where == str(tmp_path / "big.json")
    assert "rows[1733][7]: a cell is a bool" in problem.message, problem.message


def test_a_corrupt_row_of_an_installed_table_is_reported_and_the_call_falls_back(site: SiteDir) -> None:
    folder = site.install("gfx942", [], tables=[Table.model_validate(_big())])
    (listed,) = json.loads((folder / "manifest.json").read_text())["tables"]
    path = folder / listed["file"]
    data = json.loads(path.read_bytes())
    data["rows"][1999][5] = 2**70  # beyond a 64-bit int
    path.write_text(json.dumps(data, separators=(",", ":")))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["tables"][0]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    resolver = default_resolver()
    resolver.refresh()
    assert resolver.resolve(KERNEL, _key(1), MI300X).source == "default"
    (problem,) = resolver.problems.problems()
    assert problem.kind == "invalid-artifact" and problem.where == str(path)
    assert "rows[1999][5]: a cell is a bool" in problem.message, problem.message


def test_the_collector_is_paused_while_rows_are_built_and_resumed_as_it_was() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "an inner build resumed it inside an outer one"
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled(), "the caller's choice was overridden"
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError
    assert gc.isenabled()


def test_the_collector_stays_paused_until_the_last_of_two_threads_builds_ends() -> None:
    """Two threads build tables at once (a catalog's tables are built without a lock): the
    first to end must not resume the collector under the other's build, and the last to
    end resumes it."""
    entered, leave = threading.Event(), threading.Event()

    def build() -> None:
        with collector_paused():
            entered.set()
            leave.wait(10)

    other = threading.Thread(target=build)
    other.start()
    try:
        assert entered.wait(10)
        with collector_paused():
            leave.set()
            other.join(10)
            assert not other.is_alive()
            assert not gc.isenabled(), "the other thread's build ending resumed the collector under this one"
        assert gc.isenabled()
    finally:
        leave.set()
        other.join(10)
        gc.enable()


def test_nearest_key_groups_tell_typed_values_apart_and_leave_out_rows_without_int_ordinals() -> None:
    from flyconfigs.registry.search.matching import _signature

    rows = [[304, 16, 1536, 7168, "ck", 1, 0, "int_n", None, None],
            [304, 32, 1536.0, 7168, "ck", 1, 0, "float_n", None, None],
            [304, None, 1536, 7168, "ck", 1, 0, "null_m", None, None],
            [304, 64, True, 7168, "ck", 1, 0, "bool_n", None, None],
            [304, 64, 1, 7168, "ck", 1, 0, "one_n", None, None]]
    ref = TableRef(KERNEL, MI300X, "t.json", Source("override", "t", (0, 0)),
                   table=Table.model_validate(table_dict(rows=rows, entries=None)))
    assert ref.read(ProblemLog()) is not None
    exact = ("cu_num", "N", "K")
    groups = ref.signed(("M",), exact)
    assert groups[_signature({**_key(1), "N": 1536}, exact)] == [0]
    assert groups[_signature({**_key(1), "N": 1536.0}, exact)] == [1]
    assert groups[_signature({**_key(1), "N": True}, exact)] == [3]
    assert groups[_signature({**_key(1), "N": 1}, exact)] == [4]
    assert sum(map(len, groups.values())) == 4, "a row whose M is not an int is no neighbour"


def test_a_table_of_another_device_is_read_only_when_a_step_reaches_its_device(site: SiteDir) -> None:
    from factories import MI300X as MI300X_DEVICE

    mi308x = {**MI300X_DEVICE, "product": "AMD Instinct MI308X", "compute_units": 80}
    other = table_dict(device=mi308x, rows=[[80, 1, 1536, 7168, "ck", 1, 0, "on_80_cus", None, None]], entries=None)
    other["provenance"] = {**other["provenance"], "source": {**other["provenance"]["source"], "file": "other.csv"}}
    folder = site.install("gfx942", [], tables=[Table.model_validate(_big()), Table.model_validate(other)])
    listed = json.loads((folder / "manifest.json").read_text())["tables"]
    (elsewhere,) = [t["file"] for t in listed if t["device"]["compute_units"] == 80]
    (folder / elsewhere).write_bytes(b"{}")  # altered: reading it reports it
    resolver = default_resolver()
    assert resolver.resolve(KERNEL, _key(7), MI300X).config["kernelName"] == "k_7_1536"
    assert resolver.problems.problems() == [], "the 80-CU table was read for a key the 304-CU one serves"
    # A key no table of this device holds: the search goes on to the arch's other devices.
    assert resolver.resolve(KERNEL, _key(7, 3000), MI300X).source == "default"
    (problem,) = resolver.problems.problems()
    assert problem.kind == "hash-mismatch" and problem.where.endswith(elsewhere)
