"""The README's quick start prints what flyconfigs prints: its Python session runs as a
doctest and its ``explain`` transcript is the command's output, with the two official data
packages installed as real distributions holding the committed artifacts."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

from conftest import SiteDir
from flyconfigs.cli import main
from flyconfigs.publish.contents import collect

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
QUICK_START = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]


def _install_official_packages(site: SiteDir) -> None:
    """flyconfigs-sm90 and flyconfigs-gfx942, whole, at the versions the repository
    publishes them."""
    for target in ("sm90", "gfx942"):
        folder = ROOT / "artifacts" / target
        contents = collect(folder, target)
        version = (folder / "VERSION").read_text(encoding="utf-8").strip()
        site.install(target, contents.artifacts, version=version, tables=contents.tables, packs=contents.packs)


def test_the_python_session_prints_what_the_readme_shows(site: SiteDir) -> None:
    _install_official_packages(site)
    session = re.search(r"```python\n(>>> .*?)```", QUICK_START, re.S)
    assert session is not None, "the quick start has a Python session"
    test = doctest.DocTestParser().get_doctest(session.group(1), {}, "README quick start", "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_the_explain_transcript_is_what_the_command_prints(site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    _install_official_packages(site)
    block = re.search(r"```\n\$ flyconfigs (.*?)\n(.*?)```", QUICK_START, re.S)
    assert block is not None, "the quick start has an explain transcript"
    command, shown = block.group(1), block.group(2)
    assert main(re.findall(r'"[^"]*"|\S+', command)) == 0
    # The README shortens the artifact's path to the package folder.
    printed = capsys.readouterr().out.replace(f"{site.root}/", "…/")
    assert printed == shown
