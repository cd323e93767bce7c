"""Property: whatever an installed data package is damaged into — its manifest (bytes or
values), an artifact file, its entry points or its metadata — resolve still answers
(from the package or the default, never an exception) and doctor still reports."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distributions import install_data_package
from factories import make_artifact, value_paths
from flyconfigs.cli import main
from flyconfigs.registry import Resolver
from flyconfigs.schema import canonical_bytes

CHARS = st.characters(exclude_categories=["Cs"])
"""Any character but a surrogate, as an explicit alphabet: ``st.text``'s default (UTF-8
encodable) warns, on a fresh install, of characters that do not decode back the same."""

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"
ARTIFACTS = [make_artifact(), make_artifact(key={**KEY, "M": 1})]

values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 2**40) | st.floats(allow_nan=False, allow_infinity=False) | st.text(CHARS, max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(CHARS, max_size=6), inner, max_size=3),
    max_leaves=6,
)
damage = st.one_of(
    st.tuples(st.just("manifest-bytes"), st.integers(0, 4000), st.binary(max_size=6), st.integers(0, 6)),
    st.tuples(st.just("manifest-value"), st.integers(0, 200), values),
    st.tuples(st.just("artifact-bytes"), st.integers(0, 20000), st.binary(max_size=6), st.integers(0, 6)),
    st.tuples(st.just("entry-points"), st.sampled_from([
        "[flyconfigs.artifacts]\nsm90\n", "[flyconfigs.artifacts]\nsm90 = /etc\n", "[flyconfigs.artifacts]\nsm90 = ..\n",
        "[flyconfigs.artifacts]\nsm80 = flyconfigs_sm90\n", "[flyconfigs.artifacts\n", "\x00\xff",
        "[flyconfigs.artifacts]\nsm90 = flyconfigs_sm90:x:y\n",
    ])),
    st.tuples(st.just("metadata"), st.sampled_from(["", "Name:\n", "Metadata-Version: 2.1\nVersion: 1\n", "\xff"])),
)


def _splice(path: Path, offset: int, insert: bytes, cut: int) -> None:
    raw = path.read_bytes()
    offset %= max(1, len(raw))
    path.write_bytes(raw[:offset] + insert + raw[offset + cut :])


def _apply(root: Path, folder: Path, how: tuple[Any, ...]) -> None:
    info = next(root.glob("*.dist-info"))
    kind = how[0]
    if kind == "manifest-bytes":
        _splice(folder / "manifest.json", *how[1:])
    elif kind == "manifest-value":
        doc = json.loads((folder / "manifest.json").read_text())
        paths = value_paths(doc)[1:]
        path = paths[how[1] % len(paths)]
        node = doc
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = how[2]
        (folder / "manifest.json").write_bytes(canonical_bytes(doc))
    elif kind == "artifact-bytes":
        _splice(next((folder / "artifacts").glob("*.json")), *how[1:])
    elif kind == "entry-points":
        (info / "entry_points.txt").write_bytes(how[1].encode("utf-8", "surrogateescape"))
    else:
        (info / "METADATA").write_bytes(how[1].encode("utf-8", "surrogateescape"))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(damage)
def test_a_damaged_installed_package_never_breaks_resolve_or_doctor(tmp_path: Path, how: tuple[Any, ...]) -> None:
    root = tmp_path / "site"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    folder = install_data_package(root, "sm90", ARTIFACTS)
    _apply(root, folder, how)
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        resolver = Resolver()
        for m in (4096, 1, 77):
            r = resolver.resolve("rmsnorm", {**KEY, "M": m}, H200_SPEC)
            assert r.source in ("package", "default")
        resolver.check_all()
        resolver.collisions()
    finally:
        sys.path.remove(str(root))


def test_the_undamaged_package_is_served_the_same_way(tmp_path: Path) -> None:
    root = tmp_path / "site"
    root.mkdir()
    install_data_package(root, "sm90", ARTIFACTS)
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        assert Resolver().resolve("rmsnorm", KEY, H200_SPEC).source == "package"
    finally:
        sys.path.remove(str(root))


def test_doctor_reports_a_damaged_package(site: Any, capsys: Any, monkeypatch: Any) -> None:
    folder = site.install("sm90", ARTIFACTS)
    _splice(folder / "manifest.json", 10, b"\x00", 3)
    monkeypatch.setenv("FLYCONFIGS_DEVICE", H200_SPEC)
    assert main(["doctor"]) == 1
    assert "invalid-manifest" in capsys.readouterr().out
