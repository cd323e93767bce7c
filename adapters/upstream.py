"""Configs straight from an upstream release: a vLLM wheel or installed vLLM, an aiter
checkout or wheel, read where they lie, the version or commit taken from the source itself;
and what changed between two releases' vLLM configs.

- **vLLM** keeps its fused-MoE configs at ``vllm/model_executor/layers/fused_moe/configs/``.
  A wheel (``vllm-<version>-….whl``) states its version in ``vllm-<version>.dist-info/METADATA``;
  an installed vLLM (``site-packages/vllm``, or ``site-packages`` itself) in the
  ``vllm-<version>.dist-info`` beside it, else in ``vllm/_version.py``.  The revision
  recorded is the release's tag, ``v<version>``, or the commit a development version names
  (``0.34.1.dev12+g1a2b3c4d``: ``1a2b3c4d``).
- **aiter** keeps its tuned CSVs under ``aiter/configs/`` and ``aiter/ops/flydsl/``.  A
  checkout's commit is read from its ``.git`` (``HEAD``, the branch it names, ``packed-refs``;
  a worktree's ``.git`` file points to its git folder); a wheel's from its version
  (``…+g<commit>``), else the version itself.
"""

from __future__ import annotations

import json
import re
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flyconfigs.adapters.vllm import CONFIG_DIR as VLLM_CONFIG_DIR
from flyconfigs.adapters.vllm import TRITON_VERSION, parse_file_name
from flyconfigs.errors import ArtifactError, FieldProblem

__all__ = ["Change", "UpstreamTree", "aiter_tree", "compare_vllm", "is_upstream", "vllm_tree"]

_VERSION = re.compile(r"^Version:\s*(\S+)\s*$", re.MULTILINE)
_COMMIT_IN_VERSION = re.compile(r"\+g?([0-9a-f]{7,40})(?:\.|$)")
_HEX = re.compile(r"^[0-9a-f]{40}$")
_PY_VERSION = re.compile(r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""",
                         re.MULTILINE)


@dataclass
class UpstreamTree:
    """Where an upstream release's config files lie on this machine (``folder``, to search
    as a folder of files is searched), the revision read from the release itself, how it
    was read, and the temporary folder a wheel was unpacked into (removed by :meth:`close`)."""

    folder: Path
    revision: str | None
    how: str
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    def close(self) -> None:
        """Remove what a wheel was unpacked into (nothing for a folder)."""
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> UpstreamTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _revision_of_version(version: str, tag: bool) -> str:
    """The commit a development version names (``+g<hex>``), else the tag ``v<version>``
    (``tag``) or the version."""
    commit = _COMMIT_IN_VERSION.search(version)
    if commit is not None:
        return commit.group(1)
    return f"v{version}" if tag else version


def _unpack(wheel: Path, prefix: str, suffix: str) -> tuple[tempfile.TemporaryDirectory[str], str | None]:
    """The wheel's files under ``prefix`` ending in ``suffix`` unpacked into a temporary
    folder (paths kept), and the version its ``METADATA`` states."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ArtifactError(str(wheel), [FieldProblem("", f"not a readable wheel: {exc}")]) from None
    tmp = tempfile.TemporaryDirectory(prefix="flyconfigs-upstream-")
    version = None
    with archive:
        for info in archive.infolist():
            name = info.filename
            if name.endswith(".dist-info/METADATA") and name.count("/") == 1:
                found = _VERSION.search(archive.read(info).decode("utf-8", "replace"))
                version = found.group(1) if found else version
            elif name.startswith(prefix) and name.endswith(suffix) and ".." not in name.split("/") \
                    and not name.startswith("/"):
                target = Path(tmp.name) / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(info))
    return tmp, version


def _installed_version(package: Path, name: str) -> tuple[str | None, str]:
    """The version of the installed package folder ``package``: its ``<name>-*.dist-info``
    beside it, else its ``_version.py``."""
    for info in sorted(package.parent.glob(f"{name}-*.dist-info")):
        metadata = info / "METADATA"
        if metadata.is_file():
            found = _VERSION.search(metadata.read_text(encoding="utf-8", errors="replace"))
            if found:
                return found.group(1), f"{info.name}/METADATA"
    module = package / "_version.py"
    if module.is_file():
        found = _PY_VERSION.search(module.read_text(encoding="utf-8", errors="replace"))
        if found:
            return found.group(1), f"{name}/_version.py"
    return None, "no version found beside it"


def is_upstream(path: Path) -> bool:
    """Whether ``path`` is a wheel or a folder holding a release's package (``vllm/`` or
    ``aiter/``, or the package folder itself), as :func:`vllm_tree` and :func:`aiter_tree` read."""
    if path.suffix == ".whl" and path.is_file():
        return True
    return path.is_dir() and any((path / sub).is_dir() for sub in (
        "vllm/model_executor", "model_executor/layers", "aiter/configs", "configs/model_configs"))


def vllm_tree(path: str | Path) -> UpstreamTree:
    """vLLM's config folder in a wheel, an installed vLLM or a checkout at ``path`` (module
    docstring), with the revision the release states; :class:`ArtifactError` naming
    ``path`` when it holds no such folder."""
    p = Path(path)
    if p.suffix == ".whl":
        tmp, version = _unpack(p, VLLM_CONFIG_DIR + "/", ".json")
        folder = Path(tmp.name) / VLLM_CONFIG_DIR
        if not folder.is_dir():
            tmp.cleanup()
            raise ArtifactError(str(p), [FieldProblem(VLLM_CONFIG_DIR, "the wheel holds no vLLM fused-MoE configs")])
        return UpstreamTree(folder, _revision_of_version(version, tag=True) if version else None,
                            f"the wheel's METADATA (Version: {version})" if version else "no version in the wheel", tmp)
    package = p / "vllm" if (p / "vllm" / "model_executor").is_dir() else p
    folder = package / VLLM_CONFIG_DIR.removeprefix("vllm/")
    if not folder.is_dir():
        raise ArtifactError(str(p), [FieldProblem(VLLM_CONFIG_DIR, "no vLLM fused-MoE config folder here")])
    version, how = _installed_version(package, "vllm")
    return UpstreamTree(folder, _revision_of_version(version, tag=True) if version else None,
                        f"{how} (version {version})" if version else how)


def _git_commit(root: Path) -> tuple[str | None, str]:
    """The commit a checkout at ``root`` has checked out, read from its git folder."""
    git = root / ".git"
    if git.is_file():  # a worktree or submodule: "gitdir: <path>"
        text = git.read_text(encoding="utf-8", errors="replace").strip()
        git = (root / text.removeprefix("gitdir:").strip()).resolve()
    head = git / "HEAD"
    if not head.is_file():
        return None, "no .git here"
    text = head.read_text(encoding="utf-8", errors="replace").strip()
    if _HEX.match(text):
        return text, ".git/HEAD (detached)"
    ref = text.removeprefix("ref:").strip()
    for base in (git, _common_dir(git)):
        loose = base / ref
        if loose.is_file():
            value = loose.read_text(encoding="utf-8", errors="replace").strip()
            if _HEX.match(value):
                return value, f".git/{ref}"
        packed = base / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8", errors="replace").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref and _HEX.match(parts[0]):
                    return parts[0], f".git/packed-refs ({ref})"
    return None, f".git/HEAD names {ref}, which no ref file holds"


def _common_dir(git: Path) -> Path:
    """A worktree's shared git folder (its ``commondir``), else ``git`` itself."""
    common = git / "commondir"
    return (git / common.read_text(encoding="utf-8").strip()).resolve() if common.is_file() else git


def aiter_tree(path: str | Path) -> UpstreamTree:
    """aiter's package folder (``aiter/``, which holds ``configs/`` and ``ops/flydsl/``) in
    a checkout or a wheel at ``path``, with the commit the source states; :class:`ArtifactError`
    naming ``path`` when it holds no aiter configs."""
    p = Path(path)
    if p.suffix == ".whl":
        tmp, version = _unpack(p, "aiter/", ".csv")
        folder = Path(tmp.name) / "aiter"
        if not folder.is_dir():
            tmp.cleanup()
            raise ArtifactError(str(p), [FieldProblem("aiter/configs", "the wheel holds no aiter CSVs")])
        return UpstreamTree(folder, _revision_of_version(version, tag=False) if version else None,
                            f"the wheel's METADATA (Version: {version})" if version else "no version in the wheel", tmp)
    root = p if (p / "aiter" / "configs").is_dir() else p.parent
    folder = root / "aiter"
    if not (folder / "configs").is_dir():
        raise ArtifactError(str(p), [FieldProblem("aiter/configs", "no aiter checkout here")])
    commit, how = _git_commit(root)
    if commit is None:
        version, how = _installed_version(folder, "amd_aiter")
        commit = _revision_of_version(version, tag=False) if version else None
    return UpstreamTree(folder, commit, how)


@dataclass(frozen=True)
class Change:
    """One batch size of one vLLM config file that differs between two releases:
    ``added`` (only the new has it), ``removed`` (only the old), ``changed`` (both, other
    configs); ``device_name`` and ``key`` are what the file's name states."""

    device_name: str
    key: dict[str, Any]
    file: str
    m: int | None
    kind: str
    old: Any = None
    new: Any = None

    def as_json(self) -> dict[str, Any]:
        """The change as plain JSON data."""
        return {"device_name": self.device_name, "key": self.key, "file": self.file, "M": self.m, "kind": self.kind,
                "old": self.old, "new": self.new}


def _vllm_files(folder: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(folder.glob("*.json")):
        try:
            parse_file_name(path.name)
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ArtifactError, ValueError):
            continue  # not one of vLLM's config files (compare reads what vLLM reads)
        if isinstance(data, dict):
            out[path.name] = data
    return out


def compare_vllm(old: Path, new: Path) -> Iterator[Change]:
    """What changed from the vLLM config folder ``old`` to ``new``, per device and key:
    each file only one has (every batch size ``added`` or ``removed``), and in a file both
    have each batch size added, removed or changed (``triton_version`` aside), in the
    order of device, key, then ``M``."""
    before, after = _vllm_files(old), _vllm_files(new)

    def order(name: str) -> tuple[str, str]:
        named = parse_file_name(name)
        return named.device_name, json.dumps(named.axes, sort_keys=True)

    for name in sorted(set(before) | set(after), key=order):
        named = parse_file_name(name)
        a = {k: v for k, v in before.get(name, {}).items() if k != TRITON_VERSION}
        b = {k: v for k, v in after.get(name, {}).items() if k != TRITON_VERSION}
        for member in sorted(set(a) | set(b), key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k)):
            m = int(member) if member.isdigit() else None
            if member not in a:
                yield Change(named.device_name, named.axes, name, m, "added", new=b[member])
            elif member not in b:
                yield Change(named.device_name, named.axes, name, m, "removed", old=a[member])
            elif a[member] != b[member]:
                yield Change(named.device_name, named.axes, name, m, "changed", a[member], b[member])
