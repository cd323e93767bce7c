"""The version has one source, ``flyconfigs/_version.py``: the package, the facade and
the distribution's metadata all read it."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

import flyconfigs
from flyconfigs._version import __version__

ROOT = Path(__file__).resolve().parent.parent


def test_the_distribution_takes_its_version_from_the_package() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "flyconfigs._version.__version__"}
    assert metadata.version("flyconfigs") == flyconfigs.__version__ == __version__
