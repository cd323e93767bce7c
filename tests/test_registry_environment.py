"""What a resolver reads from outside the process is one snapshot per refresh: the
installed distributions are scanned once for every entry-point group (kernels, data
packages, GPU detectors), and the ``FLYCONFIGS_*`` settings are read in one module."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import flyconfigs.registry
from conftest import SiteDir
from factories import make_artifact
from flyconfigs.registry import Resolver

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the installed distributions are listed (one item per scan)."""
    counted: list[int] = []
    listed = metadata.distributions

    def counting(**kwargs: Any) -> Iterator[metadata.Distribution]:
        counted.append(1)
        return listed(**kwargs)

    monkeypatch.setattr(metadata, "distributions", counting)
    return counted


@pytest.mark.parametrize("device", [H200_SPEC, None], ids=["device-given", "device-detected"])
def test_a_first_resolve_scans_the_installed_distributions_once(site: SiteDir, scans: list[int],
                                                                  device: str | None) -> None:
    site.install("sm90", [make_artifact(key=KEY)])
    resolver = Resolver()
    scans.clear()
    resolver.resolve("rmsnorm", KEY, device)  # the kernel, the data packages and (detected) the detector
    resolver.resolve("rmsnorm", {**KEY, "M": 77}, device)
    assert len(scans) == 1
    resolver.refresh()  # packages installed since are seen: one scan more
    resolver.resolve("rmsnorm", KEY, device)
    assert len(scans) == 2


def test_a_refresh_of_one_resolver_keeps_the_others_snapshot(site: SiteDir, scans: list[int]) -> None:
    site.install("sm90", [make_artifact(key=KEY)])
    one, other = Resolver(), Resolver()
    one.resolve("rmsnorm", KEY, H200_SPEC)
    other.resolve("rmsnorm", KEY, H200_SPEC)
    scans.clear()
    one.refresh()
    other.resolve("rmsnorm", {**KEY, "M": 77}, H200_SPEC)
    assert scans == []


def _reads_environment(tree: ast.AST) -> list[int]:
    """The lines of ``tree`` that touch ``os.environ`` or call ``os.getenv``."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb")
            or isinstance(node, ast.Name) and node.id in ("environ", "getenv")]


def test_the_settings_are_read_in_one_module() -> None:
    folder = Path(flyconfigs.registry.__file__).parent
    readers, named = {}, {}
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if lines := _reads_environment(tree):
            readers[path.name] = lines
        names = sorted({node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                        and isinstance(node.value, str) and node.value.startswith("FLYCONFIGS_")
                        and node.value.isupper()})
        if names:
            named[path.name] = names
    assert list(readers) == ["settings.py"], readers
    # Every setting's name is spelled there, and only there.
    assert list(named) == ["settings.py"], named
    assert len(named["settings.py"]) == 6
