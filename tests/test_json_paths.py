"""The loader's scan of an override directory lists files as strings: the same files,
in the same order and spelt as ``str()`` of the ``Path`` that ``json_files_under``
gives (problems, explanations and resolutions show these strings)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flyconfigs.schema.jsonio import json_files_under, json_paths_under


def _tree(root: Path) -> None:
    for name in ["b.json", "a-b.json", "a/z.json", "a/b/c.json", "a.b/x.json", "A/y.json", ".hidden.json",
                 ".dot/x.json", "a/notes.txt", "a/b/.tmp.json", "é/ü.json"]:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")


@pytest.mark.parametrize("spelling", ["{root}", "{root}/", "{root}//", "{root}/./", "{root}/a/..", ".", "./", "", "sub/.."])
def test_paths_are_json_files_under_as_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str) -> None:
    _tree(tmp_path)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    folder = spelling.format(root=tmp_path)
    expected = [str(p) for p in json_files_under(folder or ".")]
    assert json_paths_under(folder or ".") == expected
    assert len(expected) == 7
    assert not any(os.path.basename(p).startswith(".") or "/.dot/" in p for p in expected)


def test_order_is_by_parts_not_by_string(tmp_path: Path) -> None:
    _tree(tmp_path)
    names = [os.path.relpath(p, tmp_path) for p in json_paths_under(tmp_path)]
    # "a/..." sorts before "a-b.json" and "a.b/..." by parts ("a" < "a-b.json"), though "/" > "-" and ".".
    assert names == ["A/y.json", "a/b/c.json", "a/z.json", "a-b.json", "a.b/x.json", "b.json", "é/ü.json"]


def test_paths_from_a_path_and_a_relative_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert json_paths_under(Path("a")) == ["a/b/c.json", "a/z.json"]
    assert json_paths_under(".")[:2] == ["A/y.json", "a/b/c.json"]
