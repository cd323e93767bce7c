"""A real package index on loopback: pypiserver serving a folder, plus the wheels of
flyconfigs' own dependencies so that pip needs no other index.

Used by the main job (scripts/demo.py) and the end-to-end tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

CACHE = Path(os.environ.get("FLYCONFIGS_WHEELHOUSE", Path.home() / ".cache" / "flyconfigs" / "wheelhouse"))
LOADER_REQUIREMENTS = ["pydantic>=2.6,<3", "packaging>=23"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _exclusive(name: str) -> Iterator[None]:
    """Hold an exclusive lock named ``name`` across processes (tests run in several)."""
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with open(CACHE.parent / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def dependency_wheels(dest: Path) -> list[Path]:
    """Copy the wheels of the loader's dependencies into ``dest`` (downloaded once into a
    cache folder) and return them."""
    marker = CACHE / ".complete"
    with _exclusive("wheelhouse"):
        if not marker.exists():
            CACHE.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--dest", str(CACHE),
                 *LOADER_REQUIREMENTS],
                check=True,
            )
            marker.touch()
    copied = []
    for wheel in sorted(CACHE.glob("*.whl")):
        shutil.copy2(wheel, dest / wheel.name)
        copied.append(dest / wheel.name)
    return copied


class LocalIndex:
    """``with LocalIndex(folder) as index:`` serves ``folder`` at ``index.url`` (uploads
    allowed without authentication) and stops the server on exit, whatever happens."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.simple = f"{self.url}simple/"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LocalIndex:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(self.port),
             "-a", ".", "-P", ".", "--disable-fallback", "--log-stream", "none", str(self.folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                err = self._process.stderr.read().decode() if self._process.stderr else ""
                code = self._process.returncode
                self.stop()
                raise RuntimeError(f"pypiserver exited with {code}: {err[-2000:]}")
            try:
                with urllib.request.urlopen(self.simple, timeout=2):
                    return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"pypiserver did not answer on {self.url} within 60 s")

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stderr is not None:
            process.stderr.close()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def build_core_wheel(root: Path, out: Path) -> Path:
    """Build the flyconfigs wheel from the checkout at ``root`` into ``out``.  Builds of
    one checkout take turns: setuptools works in the checkout's own ``build/`` folder."""
    from build import ProjectBuilder
    from pyproject_hooks import quiet_subprocess_runner

    builder = ProjectBuilder(root, python_executable=sys.executable, runner=quiet_subprocess_runner)
    with _exclusive("build-" + hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]):
        return Path(builder.build("wheel", out))


def fresh_venv(path: Path) -> Path:
    """A new virtual environment at ``path``; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"
