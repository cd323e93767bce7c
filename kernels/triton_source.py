"""What a Triton family's artifacts are bound to, read without running the kernel's code.

A family's tunings are only as good as the source they were measured with, so each
artifact records a digest (:meth:`~flyconfigs.kernels.plugin.TunableKernel.source_sha256`).
The light commands (``flyconfigs list``, ``explain``, ``doctor``, ``validate``, the
tuner's parent) compute it too, and must not import torch or Triton to do so.  A
third-party kernel lives in a package whose ``__init__`` typically imports both, so the
module's file is found the way the import system would find it — each finder on
``sys.meta_path`` asked for each dotted part in turn, with the parent's search path —
and never executed.  A family may instead bind to the installed version of the
distribution that ships the kernel (read from its metadata), so any upgrade of that
library retires the tunings made with the previous one.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import inspect
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from packaging.utils import canonicalize_name

from flyconfigs.errors import TuneError

__all__ = ["distribution_digest", "module_file", "source_digest"]


def _find_spec(fullname: str, path: Sequence[str] | None) -> importlib.machinery.ModuleSpec | None:
    """The spec the import system would use for ``fullname`` under ``path``, asking
    each meta-path finder (editable installs, zip imports, the path finder) without
    importing anything."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec: importlib.machinery.ModuleSpec | None = find(fullname, path)
        if spec is not None:
            return spec
    return None


def module_file(name: str, what: str) -> str:
    """The file module ``name`` is loaded from, found without executing it or any of its
    parent packages; :class:`TuneError` naming ``what`` when there is none."""
    loaded = sys.modules.get(name)
    if loaded is not None and isinstance(getattr(loaded, "__file__", None), str):
        return str(loaded.__file__)
    parts = name.split(".")
    path: Sequence[str] | None = None
    spec = None
    for i in range(len(parts)):
        fullname = ".".join(parts[: i + 1])
        parent = sys.modules.get(fullname)
        try:
            spec = parent.__spec__ if parent is not None and parent.__spec__ is not None else _find_spec(fullname, path)
        except (ImportError, ValueError) as exc:
            raise TuneError(f"{what}: module {name!r} cannot be found ({exc})") from None
        if spec is None:
            raise TuneError(f"{what}: module {name!r} cannot be found (no {fullname!r} on sys.path)")
        if i < len(parts) - 1:
            path = spec.submodule_search_locations
            if path is None:
                raise TuneError(f"{what}: module {name!r} cannot be found ({fullname!r} is not a package)")
    if spec is None or spec.origin is None or not spec.has_location:
        raise TuneError(f"{what}: module {name!r} has no source file")
    return spec.origin


def _read(file: str) -> bytes:
    if file.endswith(".py"):
        # Read as text, as the digest always was: the same file on Windows and Linux.
        with open(file, encoding="utf-8") as handle:
            return handle.read().encode("utf-8")
    with open(file, "rb") as handle:
        return handle.read()


def source_digest(ref: Callable[..., Any] | str, what: str) -> str:
    """sha256 of the module ``ref`` lives in: ``"module"`` or ``"module:attribute"``
    read from its file without importing it, or a callable's module's source."""
    if callable(ref):
        module = inspect.getmodule(ref)
        try:
            text = inspect.getsource(module if module is not None else ref)
        except (OSError, TypeError) as exc:
            raise TuneError(f"the source of {what} {ref!r} cannot be read ({exc})") from None
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    file = module_file(ref.partition(":")[0], f"{what} {ref!r}")
    try:
        return hashlib.sha256(_read(file)).hexdigest()
    except (OSError, UnicodeDecodeError) as exc:
        raise TuneError(f"{what} {ref!r}: {file} cannot be read ({exc})") from None


def distribution_digest(distribution: str, what: str) -> str:
    """sha256 of ``NAME==VERSION`` of the installed ``distribution`` (read from its
    metadata, nothing imported): every release of it is another source."""
    try:
        version = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        raise TuneError(f"{what}: distribution {distribution!r} is not installed") from None
    return hashlib.sha256(f"{canonicalize_name(distribution)}=={version}".encode()).hexdigest()
