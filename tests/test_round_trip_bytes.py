"""What ``import aiter``/``import vllm`` take in comes back out of ``export aiter``/``export
vllm`` byte for byte, on small hand-made files: a number's spelling, CRLF line endings, no
final newline, a short row, a row aiter never serves, a header-only file, a vLLM file's
indent, layout and member order.  The spelling that makes it so is presentation only: the
rows served are those of the same file spelled the standard way, and a spelled text that no
longer reads as its row is not written (the whole corpora: bench/round_trip_bytes.py and
the slow test at the end)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flyconfigs.adapters.aiter import import_aiter_file
from flyconfigs.adapters.aiter_export import export_aiter
from flyconfigs.cli import main
from flyconfigs.schema.table import Table

HEADER = "gfx,cu_num,M,N,K,q_dtype_w,libtype,kernelId,splitK,us,kernelName"
NAME = "a8w8_bpreshuffle_tuned_gemm.csv"
UPSTREAM = f"aiter/configs/{NAME}"


def _aiter_round_trip(tmp_path: Path, raw: bytes) -> tuple[list[Table], bytes]:
    source = tmp_path / "in" / NAME
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(raw)
    tables = import_aiter_file(source).tables
    # Through the table's file, as a package or FLYCONFIGS_PATH gives it back.
    read = [Table.model_validate_json(t.to_json_bytes()) for t in tables]
    export_aiter(read, tmp_path / "out")
    return read, (tmp_path / "out" / UPSTREAM).read_bytes()


def _rows(tables: list[Table]) -> list[object]:
    return [t.model_dump(mode="json", exclude={"spelling"}) for t in tables]


def test_a_number_keeps_its_spelling_and_serves_the_same_value(tmp_path: Path) -> None:
    raw = f"{HEADER}\ngfx942,304,1,1280,8192,torch.int8,asm,12,0,7.780,k12\n".encode()
    tables, back = _aiter_round_trip(tmp_path / "a", raw)
    assert back == raw
    (table,) = tables
    assert table.spelling is not None and table.spelling.texts == {"line 2": raw.decode().splitlines(True)[1]}
    plain, _ = _aiter_round_trip(tmp_path / "b", raw.replace(b"7.780", b"7.78"))
    assert _rows(tables) == _rows(plain) and table.measured_of(0)["us"] == 7.78
    assert plain[0].spelling is not None and plain[0].spelling.texts == {}  # the standard spelling keeps nothing


def test_crlf_and_no_final_newline_come_back(tmp_path: Path) -> None:
    raw = (f"{HEADER}\r\ngfx942,304,1,1280,8192,torch.int8,asm,12,0,7.5,k12\r\n"
           "gfx942,304,2,1280,8192,torch.int8,asm,13,0,8.25,k13").encode()
    tables, back = _aiter_round_trip(tmp_path, raw)
    assert back == raw
    (table,) = tables
    assert table.spelling is not None and table.spelling.newline == "\r\n" and list(table.spelling.texts) == ["line 3"]
    assert _rows(tables) == _rows(_aiter_round_trip(tmp_path / "lf", raw.replace(b"\r\n", b"\n") + b"\n")[0])


def test_a_short_row_comes_back_short(tmp_path: Path) -> None:
    raw = f"{HEADER}\ngfx942,304,1,1280,8192,torch.int8,asm,12,0,7.5\n".encode()  # no kernelName: pandas reads NaN
    tables, back = _aiter_round_trip(tmp_path, raw)
    assert back == raw and tables[0].config_of(0)["kernelName"] is None


def test_a_row_aiter_never_serves_is_kept_as_text_and_given_back(tmp_path: Path) -> None:
    raw = (f"{HEADER}\ngfx942,304,1,1280,8192,torch.int8,asm,12,0,7.5,k12\n"
           "gfx942,304,1,1280,8192,torch.int8,asm,99,0,6.5,k99\n"  # the same key: aiter's lookup cannot tell them apart
           "\n"
           "gfx942,304,2,1280,8192,torch.int8,asm,13,0,8.5,k13\n").encode()
    tables, back = _aiter_round_trip(tmp_path, raw)
    assert back == raw
    (table,) = tables
    assert table.entries == ["line 2", "line 5"] and [r[-4] for r in table.rows] == [12, 13]  # kernelId: only 12 serves
    assert table.spelling is not None
    assert [(u.entry, u.text) for u in table.spelling.unserved] == [
        ("line 3", "gfx942,304,1,1280,8192,torch.int8,asm,99,0,6.5,k99\n"), ("line 4", "\n")]
    assert "cannot tell them apart" in table.spelling.unserved[0].why


def test_a_spelled_text_that_no_longer_reads_as_its_row_is_not_written(tmp_path: Path) -> None:
    raw = f"{HEADER}\ngfx942,304,1,1280,8192,torch.int8,asm,12,0,7.780,k12\n".encode()
    (table,), _ = _aiter_round_trip(tmp_path, raw)
    data = table.model_dump(mode="json")
    data["rows"][0][data["columns"]["config"].index("kernelId") + len(data["columns"]["key"])] = 14
    export_aiter([Table.model_validate(data)], tmp_path / "edited")
    # The row as the table now holds it, in the standard spelling: never the stale text.
    assert (tmp_path / "edited" / UPSTREAM).read_text() == (
        f"{HEADER}\ngfx942,304,1,1280,8192,torch.int8,asm,14,0,7.78,k12\n")


def test_vllm_indent_layout_and_final_newline_come_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    config = '"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4'
    name = "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"
    raw = ('{\n  "triton_version": "3.4.0",\n  "64": {\n    "BLOCK_SIZE_M": 64,\n    "BLOCK_SIZE_N": 64,\n'
           '    "BLOCK_SIZE_K": 128,\n    "GROUP_SIZE_M": 1,\n    "num_warps": 4,\n    "num_stages": 3\n  },\n'
           f'  "1": {{{config}, "num_stages": 4}},\n\n'
           '  "16": {\n    "num_warps": 4,\n    "BLOCK_SIZE_M": 16,\n    "BLOCK_SIZE_N": 64,\n'
           '    "BLOCK_SIZE_K": 128,\n    "GROUP_SIZE_M": 1,\n    "num_stages": 4\n  }\n  }')
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_text(raw)
    assert main(["import", "vllm", str(tmp_path / "in" / name), "--out", str(tmp_path / "imported")]) == 0
    (written,) = (tmp_path / "imported").rglob("*.json")
    table = Table.model_validate_json(written.read_bytes())
    assert table.spelling is not None and table.spelling.indent == 2 and table.spelling.tail == "\n  }"
    assert sorted(table.spelling.texts) == ['"1"', '"16"']  # one on a line, one with a blank line and its own order
    # What is served is the file's values, whatever their layout.
    assert [table.key_of(i)["M"] for i in range(3)] == [64, 1, 16] and table.config_of(2)["num_warps"] == 4
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path / "imported"))
    from flyconfigs.registry import refresh

    refresh()
    capsys.readouterr()
    assert main(["export", "vllm", "--out", str(tmp_path / "out")]) == 0
    back = (tmp_path / "out" / name).read_text()
    assert back == raw and json.loads(back)["16"]["num_warps"] == 4


def test_a_header_only_file_is_kept_as_a_table_of_no_rows_and_comes_back(tmp_path: Path) -> None:
    from flyconfigs.kernels.aiter_family import PUBLISHED_TARGETS
    from flyconfigs.publish.layout import build_manifest

    raw = f"{HEADER}\r\n".encode()
    tables, back = _aiter_round_trip(tmp_path, raw)
    assert back == raw
    # No row names a device, and aiter reads the file on every GPU: one table per published arch.
    assert sorted(t.device.arch for t in tables) == sorted(PUBLISHED_TARGETS) and all(not t.rows for t in tables)
    manifest, _ = build_manifest("gfx942", [], [t for t in tables if t.device.arch == "gfx942"])
    assert manifest.tables == [] and [k.rows for k in manifest.kept] == [0]  # apart: an older reader never meets it
    with pytest.raises(ValueError, match="at least one row"):
        Table.model_validate({**tables[0].model_dump(mode="json"), "spelling": None})


_US = st.builds(lambda whole, frac, zeros: f"{whole}.{frac}{'0' * zeros}" if frac or zeros else str(whole),
                st.integers(0, 999), st.sampled_from(["", "5", "25", "78", "125"]), st.integers(0, 3))


@settings(max_examples=40, deadline=None)
@given(us=st.lists(_US, min_size=0, max_size=6), newline=st.sampled_from(["\n", "\r\n"]), final=st.booleans(),
       short=st.booleans())
def test_any_spelling_of_numbers_and_line_ends_comes_back(us: list[str], newline: str, final: bool,
                                                          short: bool) -> None:
    lines = [HEADER] + [f"gfx942,304,{m + 1},1280,8192,torch.int8,asm,{m},0,{u}" + ("" if short and m == 0 else
                                                                                   f",k{m}") for m, u in enumerate(us)]
    raw = (newline.join(lines) + (newline if final else "")).encode()
    with tempfile.TemporaryDirectory() as tmp:
        tables, back = _aiter_round_trip(Path(tmp), raw)
    assert back == raw
    assert [t.measured_of(i).get("us") for t in tables for i in range(len(t.rows))] == [float(u) if "." in u else int(u)
                                                                                       for u in us]


@pytest.mark.slow
def test_both_committed_corpora_come_back_byte_for_byte() -> None:
    from bench.round_trip_bytes import run

    result = run()
    assert (result["aiter"]["identical"], result["aiter"]["files"]) == (88, 88), result["aiter"]["differ"]
    assert (result["vllm"]["identical"], result["vllm"]["files"]) == (340, 340), result["vllm"]["differ_by_kind"]
