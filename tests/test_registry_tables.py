"""Tables are served exactly as artifacts are: from FLYCONFIGS_PATH and from data packages,
mixed freely with single artifacts, under the same precedence; a table's rows are read
only when its kernel is resolved on its arch, and a broken table is reported and skipped."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import SiteDir
from flyconfigs.cli import main
from flyconfigs.registry import default_resolver
from flyconfigs.registry.resolve import Resolver
from flyconfigs.schema import Artifact, DeviceIdentity, write_atomic
from flyconfigs.schema.table import Table
from test_schema_table import table_dict

KERNEL = "aiter_gemm_a8w8_blockscale"
MI300X = DeviceIdentity(vendor="amd", arch="gfx942", product="AMD Instinct MI300X", compute_units=304,
                        features=["sramecc+", "xnack-"])


def _table(**changes: object) -> Table:
    return Table.model_validate(table_dict(**changes))


def _single(m: int, name: str, n: int = 1536) -> Artifact:
    """A single imported artifact of the same kernel and device at ``M=m``: a table's row 0, re-keyed."""
    data = _table().row_artifact_data(0)
    data["key"] = {"cu_num": 304, "M": m, "N": n, "K": 7168}
    data["winner"]["config"] = data["candidates"][0]["config"] = {**data["winner"]["config"], "kernelName": name}
    return Artifact.model_validate(data)


def _key(m: int) -> dict[str, int]:
    return {"cu_num": 304, "M": m, "N": 1536, "K": 7168}


def test_a_table_on_the_path_serves_its_rows_beside_single_artifacts(tmp_path: Path) -> None:
    write_atomic(tmp_path / "t.json", _table().to_json_bytes())
    write_atomic(tmp_path / "single.json", _single(64, "from_a_file").to_json_bytes())
    resolver = Resolver(paths=[str(tmp_path)], detector=None)
    served = resolver.resolve(KERNEL, _key(16), MI300X)
    assert served.source == "override" and served.key_match == "exact" and served.selection == "imported"
    assert served.config == {"libtype": "ck", "kernelId": 5, "splitK": 0,
                             "kernelName": "a8w8_blockscale_1x128x128_256x16x128"}
    assert served.file == f"{tmp_path / 't.json'}#line 3"
    assert resolver.resolve(KERNEL, _key(64), MI300X).config["kernelName"] == "from_a_file"
    assert resolver.resolve(KERNEL, _key(32), MI300X).config["kernelName"] == "a8w8_blockscale_cktile_32"
    assert resolver.problems.problems() == []


def test_a_table_in_a_package_serves_and_the_path_outranks_it(site: SiteDir, tmp_path: Path,
                                                               monkeypatch: object) -> None:
    site.install("gfx942", [_single(64, "packaged_file")], tables=[_table()])
    resolver = default_resolver()
    served = resolver.resolve(KERNEL, _key(1), MI300X)
    assert (served.source, served.origin, served.key_match) == ("package", "flyconfigs-gfx942", "exact")
    assert served.config["kernelName"] == "a8w8_blockscale_1x128x128_256x16x64"
    assert resolver.resolve(KERNEL, _key(64), MI300X).config["kernelName"] == "packaged_file"
    mine = table_dict()
    mine["rows"] = [[304, 1, 1536, 7168, "ck", 9, 0, "mine", None, None]]
    mine["entries"] = ["line 9"]
    write_atomic(tmp_path / "over" / "mine.json", Table.model_validate(mine).to_json_bytes())
    path_first = Resolver(paths=[str(tmp_path / "over")], detector=None)
    assert path_first.resolve(KERNEL, _key(1), MI300X).config["kernelName"] == "mine"
    assert path_first.resolve(KERNEL, _key(16), MI300X).source == "package"
    (info,) = [p for p in resolver.packages() if p.distribution == "flyconfigs-gfx942"]
    assert info.artifacts == 4 and info.families == (KERNEL,)


def test_a_table_is_read_only_when_its_kernel_is_resolved(site: SiteDir) -> None:
    folder = site.install("gfx942", [_single(64, "packaged_file", n=2048)], tables=[_table()])
    manifest = json.loads((folder / "manifest.json").read_text())
    (listed,) = manifest["tables"]
    assert listed["rows"] == 3 and "key" not in listed
    (folder / listed["file"]).write_bytes(b"{}")  # altered after install: its hash no longer matches
    resolver = default_resolver()
    other = resolver.resolve("aiter_gemm_a8w8_bpreshuffle", {"cu_num": 304, "M": 1, "N": 1, "K": 1, "q_dtype_w": "fp8"}, MI300X)
    assert other.source == "default" and resolver.problems.problems() == []
    served = resolver.resolve(KERNEL, _key(1), MI300X)
    assert served.source == "default"
    (problem,) = resolver.problems.problems()
    assert problem.kind == "hash-mismatch" and problem.where.endswith(listed["file"])
    assert resolver.resolve(KERNEL, {"cu_num": 304, "M": 64, "N": 2048, "K": 7168}, MI300X).config["kernelName"] == "packaged_file"


def test_doctor_reads_every_table(site: SiteDir, capsys: object) -> None:
    folder = site.install("gfx942", [], tables=[_table()])
    assert main(["doctor"]) == 0
    (listed,) = json.loads((folder / "manifest.json").read_text())["tables"]
    (folder / listed["file"]).write_bytes(b"{}")
    default_resolver().refresh()
    assert main(["doctor"]) == 1


def test_validate_checks_every_row_of_a_table(tmp_path: Path, capsys: object) -> None:
    write_atomic(tmp_path / "good.json", _table().to_json_bytes())
    bad = table_dict()
    bad["columns"]["config"][3] = "kernelPath"  # not a column of the family: every row's winner is refused
    write_atomic(tmp_path / "bad.json", Table.model_validate(bad).to_json_bytes())
    assert main(["validate", str(tmp_path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)  # type: ignore[attr-defined]
    by_file = {Path(f["file"]).name: f for f in out["files"]}
    assert by_file["good.json"]["valid"] is True
    # The two tables share their keys: each row is also a duplicate of the other's.
    problems = [p for p in by_file["bad.json"]["problems"] if p["message"].startswith("invalid-config")]
    assert [p["field"] for p in problems] == ["line 2", "line 3", "line 4"]
    assert all("kernelPath" in p["message"] for p in problems)
