"""A table on ``FLYCONFIGS_PATH`` is indexed as lazily as a package's: the scan reads its
kernel and device from its head, and its rows are read and validated only when its
kernel is resolved on its arch; a head that does not say what the table says never
serves, and a broken table is still reported (by the resolve that reads it, and by
``doctor``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flyconfigs.cli import main
from flyconfigs.registry import Resolver, default_resolver
from flyconfigs.registry.sources import folders
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.registry.sources.tables import TableRef
from flyconfigs.schema import write_atomic
from flyconfigs.schema.table import Table
from test_schema_table import table_dict

KERNEL = "aiter_gemm_a8w8_blockscale"
MI300X = DeviceQuery("amd", "gfx942", "AMD Instinct MI300X", 304, ())
KEY = {"cu_num": 304, "M": 16, "N": 1536, "K": 7168}


def _write(folder: Path, name: str = "t.json", **changes: object) -> Path:
    path = folder / name
    write_atomic(path, Table.model_validate(table_dict(**changes)).to_json_bytes())
    return path


def test_a_table_on_the_path_is_read_only_when_its_kernel_is_resolved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path)
    reads: list[str] = []
    real = TableRef._read

    def counted(self: TableRef) -> Table:
        reads.append(self.location)
        return real(self)

    monkeypatch.setattr(TableRef, "_read", counted)
    resolver = Resolver([str(tmp_path)], detector=None)
    assert resolver.resolve("rmsnorm", {"M": 8, "N": 1024, "dtype": "bf16", "weight_dtype": "bf16"},
                            "sm90:132:NVIDIA H200").source == "default"
    assert resolver.resolve("aiter_gemm_a8w8", {"cu_num": 304, "M": 1, "N": 1, "K": 1, "q_dtype_w": "torch.int8"},
                            MI300X).source == "default"
    assert reads == []
    served = resolver.resolve(KERNEL, KEY, MI300X)
    assert served.source == "override" and served.config["kernelId"] == 5
    assert reads == [str(tmp_path / "t.json")]


def test_a_table_whose_head_is_fine_but_rows_are_not_is_reported_when_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path)
    raw = path.read_bytes().replace(b'"rows":[[304,1,1536,', b'"rows":[[304,')  # a row of too few cells
    path.write_bytes(raw)
    resolver = Resolver([str(tmp_path)], detector=None)
    assert resolver.resolve(KERNEL, KEY, MI300X).source == "default"
    assert [(p.kind, p.where) for p in resolver.problems.problems()] == [("invalid-artifact", str(path))]
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path))
    default_resolver().refresh()
    assert main(["doctor"]) == 1
    assert "invalid-artifact" in capsys.readouterr().out


def test_a_head_that_names_another_kernel_than_the_table_never_serves(tmp_path: Path) -> None:
    path = _write(tmp_path)
    data = json.loads(path.read_bytes())
    # A hand-made file that reads one way to a lenient reader (the last of two names) and
    # is refused by the full read (duplicate keys).
    raw = path.read_bytes().replace(b'"form":"table","kernel":{"name":"aiter_gemm_a8w8_blockscale"',
                                    b'"form":"table","kernel":{"name":"x","name":"aiter_gemm_a8w8_blockscale"', 1)
    assert raw != path.read_bytes()
    path.write_bytes(raw)
    assert data["kernel"]["name"] == KERNEL
    resolver = Resolver([str(tmp_path)], detector=None)
    assert resolver.resolve(KERNEL, KEY, MI300X).source == "default"
    assert [p.kind for p in resolver.problems.problems()] == ["invalid-artifact"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12), min_size=3, max_size=3),
       st.sampled_from(["AMD Instinct MI300X", 'odd "name" ],"form":"table","kernel":{', "x"]))
def test_the_head_says_the_kernel_and_device_the_table_says(entries: list[str], product: str) -> None:
    # Whatever the entries hold (the text the head looks for among them), the head of a
    # written table is its kernel and device.
    import tempfile

    with tempfile.TemporaryDirectory() as raw:
        table = Table.model_validate(table_dict(entries=entries, device={**table_dict()["device"], "product": product}))
        path = Path(raw) / "t.json"
        write_atomic(path, table.to_json_bytes())
        assert folders._table_head(str(path)) == (table.kernel.name, table.device.identity, "table")


def test_a_pack_on_the_path_is_read_only_when_its_kernel_is_resolved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed RMSNorm packs (schema 1.7) on ``FLYCONFIGS_PATH``: indexed from their
    heads, and read when RMSNorm is first resolved on sm90, not when another kernel is."""
    import shutil

    from flyconfigs.registry.sources.packs import PackRef
    from flyconfigs.schema.pack import Pack

    committed = Path(__file__).resolve().parents[1] / "artifacts" / "sm90"
    for path in committed.glob("rmsnorm-sm90-*"):
        shutil.copyfile(path, tmp_path / path.name)
    packs = sorted(str(p) for p in tmp_path.glob("rmsnorm-sm90-pack-*.json"))
    assert packs and all(folders._table_head(p)[2] == "pack" for p in packs)  # type: ignore[index]
    reads: list[str] = []
    real = PackRef._read

    def counted(self: PackRef) -> Pack:
        reads.append(self.location)
        return real(self)

    monkeypatch.setattr(PackRef, "_read", counted)
    resolver = Resolver([str(tmp_path)], detector=None, packages=False)
    fused = {"M": 8, "N": 1024, "dtype": "bf16", "weight_dtype": "bf16"}
    assert resolver.resolve("fused_add_rmsnorm", fused, "sm90:132:NVIDIA H200").source == "default"
    assert reads == []
    served = resolver.resolve("rmsnorm", {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"},
                              "sm90:132:NVIDIA H200")
    assert served.source == "override" and served.key_match == "exact"
    # The asked card's own pack only: the others' devices are never weighed.
    h200 = [p for p in packs if folders._table_head(p)[1].product == "NVIDIA H200"]  # type: ignore[index]
    assert reads == h200 and len(h200) == 1
