"""The README's install section works on a fresh machine where no index serves
flyconfigs: its first block, run in a fresh virtual environment, installs flyconfigs
from this checkout, builds both data packages with ``flyconfigs publish artifacts
--all`` and installs them, and ``flyconfigs list`` finds both through their entry points.

Stand-ins, said plainly: pip reads wheels from a local folder (``--no-index
--find-links``) instead of PyPI — the third-party wheels are downloaded once into the
test cache, as the other end-to-end tests' are — and ``.`` is this checkout's wheel
built first; ``artifacts`` is a copy holding three artifacts a target (with their
``VERSION``), since building the whole of both packages takes over a minute."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from local_index import CACHE, _exclusive, build_core_wheel, dependency_wheels, fresh_venv  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PUBLISH_REQUIREMENTS = ["build>=1.2", "twine>=5", "setuptools>=70"]


def _install_block() -> list[str]:
    section = README.split("## Install\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("\n\n")[1]
    return [line.strip().split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def _wheelhouse(dest: Path) -> None:
    """The loader's dependencies and the publish extra's, from the test cache."""
    dependency_wheels(dest)
    marker = CACHE / ".publish-complete"
    with _exclusive("wheelhouse"):
        if not marker.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--dest",
                            str(CACHE / "publish"), *PUBLISH_REQUIREMENTS], check=True)
            marker.touch()
    for wheel in (CACHE / "publish").glob("*.whl"):
        shutil.copy2(wheel, dest / wheel.name)


def test_the_readme_install_block_works_with_no_index(tmp_path: Path) -> None:
    lines = _install_block()
    assert lines == [
        "git clone <this repository> flyconfigs && cd flyconfigs",
        "python -m venv .venv && . .venv/bin/activate",
        "pip install '.[publish]'",
        "flyconfigs publish artifacts --all --out dist",
        "pip install dist/flyconfigs_sm90-*.whl dist/flyconfigs_gfx942-*.whl",
        "flyconfigs list",
    ], "the README's install block changed: this test runs it line by line"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheelhouse(wheels)
    core = build_core_wheel(ROOT, wheels)
    checkout = tmp_path / "flyconfigs"
    for target in ("sm90", "gfx942"):
        folder = checkout / "artifacts" / target
        folder.mkdir(parents=True)
        shutil.copy2(ROOT / "artifacts" / target / "VERSION", folder / "VERSION")
        for path in sorted((ROOT / "artifacts" / target).glob("rmsnorm-*-pack-*.json"))[:1]:  # a pack, its measurements
            shutil.copy2(path, folder / path.name)
            measurements = path.with_name(path.name.replace("-pack-", "-measurements-") + ".gz")
            shutil.copy2(measurements, folder / measurements.name)
    python = fresh_venv(checkout / ".venv")  # line 2
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYCONFIGS_", "PIP_")) and k != "PYTHONPATH"}
    env.update(PATH=f"{python.parent}{os.pathsep}{env['PATH']}", PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels),
               FLYCONFIGS_NO_GPU_DETECT="1")
    # line 3: '.' is the checkout, here its wheel
    run = [lines[2].replace("'.[publish]'", shlex.quote(f"flyconfigs[publish] @ {core.as_uri()}")), *lines[3:]]
    shown = ""
    for line in run:
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=checkout, env=env, timeout=600)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        shown = done.stdout
    packages = [line.split()[0] for line in shown.split("packages:", 1)[1].splitlines() if line.strip()]
    assert sorted(packages) == ["flyconfigs-gfx942", "flyconfigs-sm90"], shown
