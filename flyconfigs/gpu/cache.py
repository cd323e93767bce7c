"""The on-disk compile cache.

Entries are ``<dir>/<key[:2]>/<key>.bin`` (the code object) and ``<key>.json`` (the
lowered name, the log, what built it), each written atomically, so several processes
compiling the same kernel at once each write a whole file and readers never see a torn
one.  A store writes both files to temporary files without a lock, then, under a lock
file (``.lock``), renames them into place and adds its size, less that of the entry it
replaces, to a running total kept in the lock file itself; it scans the entries only
when that total passes the cap, so storing stays cheap in a cache of many thousand
entries and processes storing at once write their data at once.  A hit refreshes the
entry's time; past the cap the least recently used entries are removed, by one process
at a time under the same lock, and the scan writes the true total back.  An entry is not
flushed to disk one by one: one left torn by a crash fails its sha256 check and is
compiled again.

Location: ``FLYCONFIGS_CACHE_DIR``, else platformdirs' user cache dir.  Cap:
``FLYCONFIGS_CACHE_MAX_BYTES`` (bytes, or a number with KiB/MiB/GiB; default 1 GiB).
A hit is checked against the sha256 stored with the entry, so a corrupted code object
is never loaded.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flyconfigs.errors import ArtifactError, ConfigurationError
from flyconfigs.schema.jsonio import parse_document, read_file_bytes, stage_atomic

__all__ = ["CACHE_DIR_ENV", "CACHE_MAX_ENV", "CompileCache", "default_cache_dir", "parse_size"]

CACHE_DIR_ENV = "FLYCONFIGS_CACHE_DIR"
CACHE_MAX_ENV = "FLYCONFIGS_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30
_SIZE = re.compile(r"^([0-9]{1,15})\s*(|B|KiB|MiB|GiB|TiB|kB|MB|GB|TB)$")
_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_META_MAX = 1 << 20
_LOCK = ".lock"


def parse_size(text: str, variable: str = CACHE_MAX_ENV) -> int:
    """``"1073741824"``, ``"1GiB"`` or ``"500 MB"`` in bytes; :class:`ConfigurationError`
    naming ``variable`` otherwise."""
    match = _SIZE.match(text.strip())
    if not match:
        raise ConfigurationError(
            f"{variable}={text!r} is not a size: use bytes or a number with KiB, MiB, GiB, kB, MB or GB"
        )
    return int(match.group(1)) * _UNITS[match.group(2)]


def default_cache_dir() -> Path:
    """``FLYCONFIGS_CACHE_DIR`` or ``<user cache dir>/flyconfigs/kernels`` (platformdirs'
    user cache dir; without platformdirs, ``$XDG_CACHE_HOME`` or ``~/.cache``, so that
    a GPU is detected and described where only the bindings are installed)."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override)
    try:
        from platformdirs import user_cache_dir
    except ImportError:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flyconfigs" / "kernels"
    return Path(user_cache_dir("flyconfigs")) / "kernels"


class CompileCache:
    """A size-capped, least-recently-used store of compiled code objects."""

    def __init__(self, root: Path | None = None, max_bytes: int | None = None) -> None:
        self.root = root if root is not None else default_cache_dir()
        env_max = os.environ.get(CACHE_MAX_ENV)
        self.max_bytes = max_bytes if max_bytes is not None else parse_size(env_max) if env_max else DEFAULT_MAX_BYTES

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.root / key[:2]
        return folder / f"{key}.bin", folder / f"{key}.json"

    def get(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        """The code and metadata stored under ``key``, or ``None``.  Anything wrong with
        an entry (unreadable, malformed or oddly nested metadata, missing fields, code
        whose size or sha256 differs from what was stored) is a miss, and the entry is
        removed so the next compile replaces it."""
        code_path, meta_path = self._paths(key)
        try:
            meta = parse_document(read_file_bytes(meta_path, _META_MAX), str(meta_path))
            code = read_file_bytes(code_path, 1 << 31)
        except (OSError, ArtifactError):
            return None
        if (
            not isinstance(meta, dict)
            or not isinstance(meta.get("lowered_name"), str)
            or not isinstance(meta.get("log", ""), str)
            or meta.get("size") != len(code)
            or meta.get("sha256") != hashlib.sha256(code).hexdigest()
        ):
            self._remove(key)
            return None
        try:
            os.utime(code_path)
        except OSError:
            pass
        return code, meta

    def _remove(self, key: str) -> None:
        for path in self._paths(key):
            try:
                path.unlink()
            except OSError:
                pass

    def put(self, key: str, code: bytes, meta: dict[str, Any]) -> None:
        """Store ``code`` and ``meta`` under ``key`` (replacing an entry already there),
        then evict if the cache is over its cap.

        Both files are written to temporary files first, outside the lock, so processes
        storing at once write their data at once; under the lock a store only reads the
        size of the entry it replaces, renames its two files into place and updates the
        running total, so concurrent stores of one key count it once and an entry's two
        files come from one store."""
        code_path, meta_path = self._paths(key)
        record = {**meta, "size": len(code), "sha256": hashlib.sha256(code).hexdigest()}
        staged: list[str] = []
        try:
            staged.append(stage_atomic(code_path, code, durable=False))
            staged.append(stage_atomic(meta_path, json.dumps(record, sort_keys=True).encode(), durable=False))
            with _file_lock(self.root / _LOCK) as lock:
                # A re-store replaces the old code: the total grows by the difference only.
                try:
                    replaced = code_path.stat().st_size
                except OSError:
                    replaced = 0
                os.replace(staged[0], code_path)
                os.replace(staged[1], meta_path)
                staged = []
                total = _recorded_total(lock)
                if total is not None and 0 <= total - replaced and total - replaced + len(code) <= self.max_bytes:
                    _record_total(lock, total - replaced + len(code))
                    return
                self._evict_locked(lock)
        finally:
            for path in staged:
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def size(self) -> int:
        """Bytes of code objects stored."""
        return sum(p.stat().st_size for p in self.root.glob("*/*.bin") if p.exists())

    def evict(self) -> list[str]:
        """Remove least-recently-used entries until the cache fits its cap; returns the
        keys removed."""
        if not self.root.exists():
            return []
        with _file_lock(self.root / _LOCK) as lock:
            return self._evict_locked(lock)

    def _evict_locked(self, lock: int) -> list[str]:
        removed: list[str] = []
        entries = []
        for code_path in self.root.glob("*/*.bin"):
            try:
                st = code_path.stat()
            except FileNotFoundError:
                continue
            entries.append((st.st_mtime, st.st_size, code_path))
        total = sum(size for _, size, _ in entries)
        for _, size, code_path in sorted(entries):
            if total <= self.max_bytes:
                break
            for path in (code_path, code_path.with_suffix(".json")):
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
            total -= size
            removed.append(code_path.stem)
        _record_total(lock, total)
        return removed


def _recorded_total(lock: int) -> int | None:
    """The running total of stored bytes kept in the lock file, or None when it is
    missing or unreadable (a fresh cache, or a write torn by a crash)."""
    try:
        text = os.pread(lock, 64, 0)
    except OSError:
        return None
    first, _, second = text.strip().partition(b" ")
    return int(first) if first.isdigit() and first == second else None


def _record_total(lock: int, total: int) -> None:
    """Write ``total`` into the lock file in place: twice, at a fixed width, so a write
    torn by a crash reads as no total (and the next store scans)."""
    try:
        os.pwrite(lock, b"%020d %020d\n" % (total, total), 0)
    except OSError:
        pass  # the next store finds no total and scans


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[int]:
    """An exclusive ``flock`` on ``path`` (created if missing) for a ``with`` block,
    yielding the open descriptor, which holds the running total."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)
