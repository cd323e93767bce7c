"""An override directory's index from each file's tail: devices that differ only in a
value's type are two devices, and the tail is decoded exactly as ``json.loads`` decodes
its bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from factories import H200, artifact_dict
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.sources import folders
from flyconfigs.registry.sources.folders import scan_directory
from flyconfigs.schema import canonical_bytes

_ANCHOR = b',"device":{'


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(canonical_bytes(data))


def test_a_bool_where_a_count_was_is_another_device(tmp_path: Path) -> None:
    # 1 == True and both hash alike: a device cached by value alone would index the
    # second file with the first file's valid identity.
    _write(tmp_path / "a.json", artifact_dict(device={**H200, "compute_units": 1}))
    _write(tmp_path / "b.json", artifact_dict(device={**H200, "compute_units": True}, key={"M": 8, "N": 8192,
                                                                                         "dtype": "bf16",
                                                                                         "weight_dtype": "bf16"}))
    folders._DEVICES.clear()
    problems = ProblemLog()
    entries = scan_directory(tmp_path, 0, problems)
    assert [e.location for e in entries] == [str(tmp_path / "a.json")]
    assert entries[0].device.compute_units == 1
    assert [(p.kind, p.where) for p in problems.problems()] == [("invalid-artifact", str(tmp_path / "b.json"))]


def _reference(tail: bytes) -> dict[str, Any] | None:
    """The tail's members as the scan first decoded them: ``json.loads`` of the bytes."""
    at = tail.rfind(_ANCHOR)
    for _ in range(folders._ATTEMPTS):
        if at < 0:
            break
        try:
            members = json.loads(b"{" + tail[at + 1:])
        except ValueError:
            members = None
        if isinstance(members, dict) and "device" in members:
            return members
        at = tail.rfind(_ANCHOR, 0, at)
    return None


_PIECES = st.sampled_from([_ANCHOR, b"}", b"{", b'"', b'"a":1', b",", b"\\ud800", b"\xed\xa0\x80", b"\xff", b"\xc3\xa9",
                           b"[", b"]", b"null", b" ", b'"x"', b":"])


@given(st.lists(_PIECES, max_size=24).map(b"".join), st.binary(max_size=8))
def test_tail_members_are_json_loads_of_the_bytes(body: bytes, noise: bytes) -> None:
    for tail in (body, noise + body, body + b"}", noise + _ANCHOR + body + b"}"):
        assert folders._top_level_from_device(tail) == _reference(tail)


def test_tail_members_of_a_written_artifact(tmp_path: Path) -> None:
    raw = canonical_bytes(artifact_dict())
    members = folders._top_level_from_device(raw[-4096:])
    assert members is not None and members == _reference(raw[-4096:])
    assert members["device"]["product"] == H200["product"] and members["kernel"]["name"] == "rmsnorm"
