"""``flyconfigs.tuner.emit``: the source revision an artifact records is flyconfigs' own
checkout's or none, and git is asked once per process."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flyconfigs.tuner import emit


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args], cwd=folder,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _repository(folder: Path, files: dict[str, str]) -> str:
    """A git repository at ``folder`` committing ``files``; returns HEAD's 12 hex digits."""
    folder.mkdir(parents=True)
    _git(folder, "init", "-q")
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    _git(folder, "add", *files)
    _git(folder, "commit", "-q", "-m", "start")
    return _git(folder, "rev-parse", "--short=12", "HEAD")


@pytest.fixture
def revision_of(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``git_revision()`` as the copy of emit.py at a given path would answer it."""
    def clear() -> None:
        getattr(emit.git_revision, "cache_clear", lambda: None)()

    def ask(file: Path) -> str | None:
        monkeypatch.setattr(emit, "__file__", str(file))
        clear()
        return emit.git_revision()

    yield ask
    monkeypatch.undo()
    clear()


def test_a_copy_installed_in_another_projects_repository_records_no_revision(tmp_path: Path, revision_of: Any) -> None:
    project = tmp_path / "project"
    _repository(project, {"README.md": "another project\n", ".gitignore": ".venv/\n"})
    installed = project / ".venv" / "lib" / "python3.11" / "site-packages" / "flyconfigs" / "tuner" / "emit.py"
    installed.parent.mkdir(parents=True)
    installed.write_text("")
    assert revision_of(installed) is None


def test_a_checkout_of_flyconfigs_records_its_head(tmp_path: Path, revision_of: Any) -> None:
    head = _repository(tmp_path / "flyconfigs", {"pyproject.toml": "[project]\nname = 'flyconfigs'\n",
                                                 "tuner/emit.py": ""})
    assert revision_of(tmp_path / "flyconfigs" / "tuner" / "emit.py") == head
    # The same layout, but the repository does not track the file: not flyconfigs' checkout.
    _repository(tmp_path / "other", {"README.md": "x\n"})
    (tmp_path / "other" / "tuner").mkdir()
    (tmp_path / "other" / "tuner" / "emit.py").write_text("")
    assert revision_of(tmp_path / "other" / "tuner" / "emit.py") is None


def test_a_checkout_whose_code_differs_from_head_records_no_revision(tmp_path: Path, revision_of: Any) -> None:
    # Edited code, or files copied beside an older .git, is no revision's code.
    checkout = tmp_path / "flyconfigs"
    head = _repository(checkout, {"tuner/emit.py": "", "kernels/rmsnorm.cu": "// one\n",
                                  "artifacts/sm90/VERSION": "1\n", "docs/tuning.md": "x\n"})
    emit_py = checkout / "tuner" / "emit.py"
    assert revision_of(emit_py) == head
    (checkout / "kernels" / "rmsnorm.cu").write_text("// two\n")
    assert revision_of(emit_py) is None
    (checkout / "kernels" / "rmsnorm.cu").unlink()
    assert revision_of(emit_py) is None
    _git(checkout, "checkout", "-q", "--", "kernels/rmsnorm.cu")
    # Data tuned into the checkout, docs and untracked files change no code.
    (checkout / "artifacts" / "sm90" / "VERSION").write_text("2\n")
    (checkout / "docs" / "tuning.md").write_text("y\n")
    (checkout / "untracked.txt").write_text("z\n")
    assert revision_of(emit_py) == head


def test_the_code_paths_are_the_folders_the_package_maps() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[1]
    mapped = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    tops = {folder.split("/")[0] for folder in mapped.values()}
    assert set(emit.CODE_PATHS) == {"pyproject.toml"} | tops


def test_git_is_asked_once_per_process(tmp_path: Path, revision_of: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    head = _repository(tmp_path / "flyconfigs", {"tuner/emit.py": ""})
    calls: list[list[str]] = []
    real_run = subprocess.run

    def counting_run(command: list[str], *args: Any, **kwargs: Any) -> Any:
        calls.append(command)
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(emit.subprocess, "run", counting_run)
    assert revision_of(tmp_path / "flyconfigs" / "tuner" / "emit.py") == head
    first = len(calls)
    assert [emit.git_revision() for _ in range(50)] == [head] * 50
    assert len(calls) == first
