"""Writing real distributions into a folder: files plus ``.dist-info`` metadata, exactly
what an installer leaves behind.  Used by the test fixtures and the benchmarks."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from pathlib import Path

from flyconfigs.publish.layout import distribution_name, package_files
from flyconfigs.schema import Artifact
from flyconfigs.schema.manifest import target_module
from flyconfigs.schema.pack import Pack
from flyconfigs.schema.table import Table


def _record_line(rel: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}"


def install_data_package(
    root: Path,
    target: str,
    artifacts: Sequence[Artifact],
    version: str = "1.0.0",
    *,
    name: str | None = None,
    init_code: str | None = None,
    entry_point: str | None = None,
    module: str | None = None,
    tables: Sequence[Table] = (),
    packs: Sequence[tuple[Pack, bytes]] = (),
) -> Path:
    """Install ``flyconfigs-<target>`` (or ``name``) holding ``artifacts`` (and ``tables``)
    into ``root``; returns its import-package folder.  ``init_code`` replaces ``__init__.py``."""
    default_module = target_module(target)
    module = module or default_module
    files = {module + rel[len(default_module):]: data for rel, data in package_files(target, artifacts, tables=tables,
                                                                                   packs=packs).items()}
    if init_code is not None:
        files[f"{module}/__init__.py"] = init_code.encode()
    dist = name or distribution_name(target)
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    records = []
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        records.append(_record_line(rel, data))
    meta = {
        "METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        "entry_points.txt": f"[flyconfigs.artifacts]\n{entry_point or target} = {module}\n",
    }
    for fname, text in meta.items():
        (info / fname).write_text(text)
        records.append(_record_line(f"{info.name}/{fname}", text.encode()))
    (info / "RECORD").write_text("\n".join(records + [f"{info.name}/RECORD,,"]) + "\n")
    return root / module


def install_kernel_package(root: Path, name: str, version: str, files: dict[str, str],
                           kernels: dict[str, str]) -> Path:
    """Install distribution ``name`` holding ``files`` (relative path → text) into ``root``,
    declaring ``kernels`` (kernel name → entry-point object reference) in the
    ``flyconfigs.kernels`` group; returns its ``.dist-info`` folder."""
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    records = []
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        records.append(_record_line(rel, text.encode()))
    meta = {
        "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        "entry_points.txt": "[flyconfigs.kernels]\n" + "".join(f"{k} = {v}\n" for k, v in kernels.items()),
    }
    for fname, text in meta.items():
        (info / fname).write_text(text)
        records.append(_record_line(f"{info.name}/{fname}", text.encode()))
    (info / "RECORD").write_text("\n".join(records + [f"{info.name}/RECORD,,"]) + "\n")
    return info
