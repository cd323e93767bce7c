"""One stray file on ``FLYCONFIGS_PATH`` never breaks another file's lookup: whatever
its tail holds (any nesting, any number Python's reader accepts but JSON has not), the
file is reported and the good files beside it still serve."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from factories import artifact_dict
from flyconfigs.cli import main
from flyconfigs.registry import default_resolver
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.resolve import Resolver
from flyconfigs.registry.sources import folders
from flyconfigs.registry.sources.folders import scan_directory
from flyconfigs.schema import canonical_bytes

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"


def _good(folder: Path) -> Path:
    path = folder / "good.json"
    path.write_bytes(canonical_bytes(artifact_dict(key=KEY)))
    return path


def _resolver(folder: Path) -> Resolver:
    return Resolver([str(folder)], packages=False)


def _served_from(folder: Path, good: Path) -> None:
    resolution = _resolver(folder).resolve("rmsnorm", KEY, H200_SPEC)
    assert resolution.file == str(good)


def test_a_deeply_nested_tail_is_reported_and_the_good_file_still_serves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    good = _good(tmp_path)
    stray = tmp_path / "stray.json"
    stray.write_bytes(b'{"a":1,"device":{"x":' + b"[" * 3000 + b"]" * 3000 + b"}}")
    problems = ProblemLog()
    entries = scan_directory(tmp_path, 0, problems)
    assert [e.location for e in entries] == [str(good)]
    assert [(p.kind, p.where) for p in problems.problems()] == [("invalid-artifact", str(stray))]
    _served_from(tmp_path, good)
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path))
    default_resolver().refresh()
    assert main(["doctor"]) == 1
    assert "invalid-artifact" in capsys.readouterr().out
    assert main(["validate", str(tmp_path)]) == 1
    assert "stray.json: <document>: nesting deeper than" in capsys.readouterr().out


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_a_non_finite_key_value_is_reported_and_the_good_files_still_serve(tmp_path: Path, number: str) -> None:
    good = _good(tmp_path)
    raw = canonical_bytes(artifact_dict(key={**KEY, "M": 2048}))
    bad = tmp_path / "bad.json"
    bad.write_bytes(raw.replace(b'"M":2048', f'"M":{number}'.encode()))
    problems = ProblemLog()
    entries = scan_directory(tmp_path, 0, problems)
    assert [e.location for e in entries] == [str(good)]
    assert [(p.kind, p.where) for p in problems.problems()] == [("invalid-artifact", str(bad))]
    _served_from(tmp_path, good)
    # Nearest-key matching too: the bad file's kernel on that arch still serves.
    near = _resolver(tmp_path).resolve("rmsnorm", {**KEY, "M": 1024}, H200_SPEC)
    assert near.file == str(good)


_TAIL_PIECES = st.sampled_from([b"[", b"]", b"{", b"}", b'"x":', b",", b"1", b"NaN", b"Infinity", b"-Infinity",
                                b"1e999", b"-1e400", b"null", b'"', b":", b"\\", b"\xff", b"\xed\xa0\x80"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_TAIL_PIECES, max_size=40).map(b"".join), st.integers(0, 4000), st.sampled_from(["key", "device"]))
def test_any_malformed_tail_leaves_the_good_file_serving(tmp_path: Path, tail: bytes, depth: int, where: str) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    good = _good(folder)
    raw = canonical_bytes(artifact_dict(key={**KEY, "M": 2048}))
    member = b'"key":{' if where == "key" else b'"device":{'
    at = raw.rindex(member) + len(member)
    (folder / "stray.json").write_bytes(raw[:at] + b'"z":' + b"[" * depth + tail + b"]" * depth + raw[at:])
    problems = ProblemLog()
    entries = scan_directory(folder, 0, problems)
    assert str(good) in [e.location for e in entries]
    for entry in entries:
        assert all(not isinstance(v, float) or math.isfinite(v) for v in entry.key.values())
    _served_from(folder, good)


def test_the_tail_decoder_refuses_what_the_full_read_refuses() -> None:
    for number in (b"NaN", b"Infinity", b"-Infinity", b"1e999"):
        tail = b'x,"device":{"arch":"sm90"},"key":{"M":' + number + b"}}"
        assert folders._top_level_from_device(tail) is None
    assert folders._top_level_from_device(b'x,"device":{"a":' + b"[" * 5000 + b"]" * 5000 + b"}}") is None


def test_concurrent_first_resolves_after_a_refresh_scan_each_folder_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from flyconfigs.registry.search import catalog

    folders_ = [tmp_path / f"f{i}" for i in range(3)]
    for folder in folders_:
        folder.mkdir()
        _good(folder)
    scans: list[Path] = []
    real = catalog.scan_directory

    def counted(folder: Path, *args: object, **kwargs: object) -> object:
        scans.append(folder)
        return real(folder, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(catalog, "scan_directory", counted)
    resolver = Resolver([str(f) for f in folders_], packages=False)
    resolver.resolve("rmsnorm", KEY, H200_SPEC)
    resolver.refresh()
    scans.clear()
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def first() -> None:
        try:
            start.wait()
            assert resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "override"
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=first) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(scans) == sorted(folders_)


def test_a_folder_of_stale_files_is_passed_over_without_reading_them(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from flyconfigs.registry import kernel_declaration
    from flyconfigs.registry.sources.entries import Entry

    version = kernel_declaration("rmsnorm").version
    for m in (64, 256, 1024, 4096):
        data = artifact_dict(key={**KEY, "M": m})
        data["kernel"]["version"] = version + 1  # tuned by a newer family than the one installed
        (tmp_path / f"m{m}.json").write_bytes(canonical_bytes(data))
    reads: list[str] = []
    real = Entry._read

    def counted(self: Entry) -> object:
        reads.append(self.location)
        return real(self)

    monkeypatch.setattr(Entry, "_read", counted)
    resolver = _resolver(tmp_path)
    served = resolver.resolve("rmsnorm", {**KEY, "M": 100}, H200_SPEC)
    assert served.source == "default" and reads == []
    stale = [p for p in resolver.problems.problems() if p.kind == "stale-artifact"]
    assert len(stale) == 4 and all(f"version {version + 1}" in p.message for p in stale)
