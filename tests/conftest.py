"""Shared fixtures: real data-package distributions on a temporary ``sys.path``."""

from __future__ import annotations

import glob
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# Without a GPU, Triton runs through its interpreter.  Triton decides at its first import
# whether its own library is interpreted, and collecting any module that imports it (the
# GPU tests' too) imports it, so the choice is made here, before collection.
if "TRITON_INTERPRET" not in os.environ and not (glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd")):
    os.environ["TRITON_INTERPRET"] = "1"

from distributions import install_data_package  # noqa: E402
from factories import make_artifact  # noqa: E402

from flyconfigs.registry import default_resolver  # noqa: E402
from flyconfigs.publish.layout import distribution_name  # noqa: E402
from flyconfigs.schema import Artifact  # noqa: E402
from flyconfigs.schema.manifest import target_module  # noqa: E402


class SiteDir:
    """A folder on ``sys.path`` into which tests install real distributions (files plus
    ``.dist-info`` metadata, exactly what pip leaves behind)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def install(self, target: str, artifacts: Sequence[Artifact], version: str = "1.0.0", **options: Any) -> Path:
        """Install ``flyconfigs-<target>`` holding ``artifacts`` (options as
        :func:`distributions.install_data_package`) and refresh the resolver."""
        folder = install_data_package(self.root, target, artifacts, version, **options)
        default_resolver().refresh()
        return folder

    def uninstall(self, target: str, name: str | None = None) -> None:
        """Remove what :meth:`install` put here for ``target``."""
        dist = (name or distribution_name(target)).replace("-", "_")
        for info in self.root.glob(f"{dist}-*.dist-info"):
            shutil.rmtree(info)
        shutil.rmtree(self.root / target_module(target), ignore_errors=True)
        default_resolver().refresh()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SiteDir]:
    """A temporary site folder at the front of ``sys.path``; the process-wide resolver is
    refreshed before and after."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv("FLYCONFIGS_PATH", raising=False)
    monkeypatch.delenv("FLYCONFIGS_DEVICE", raising=False)
    default_resolver().refresh()
    yield SiteDir(root)
    default_resolver().refresh()


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("FLYCONFIGS_NO_GPU_DETECT", "1")
    monkeypatch.setenv("FLYCONFIGS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("FLYCONFIGS_PATH", raising=False)
    monkeypatch.delenv("FLYCONFIGS_DEVICE", raising=False)


@pytest.fixture
def artifact_factory() -> Callable[..., Artifact]:
    """``make_artifact`` from tests/factories.py."""
    return make_artifact
