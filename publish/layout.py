"""The layout of a ``flyconfigs-<target>`` data package, shared by publish and tests.

The import package ``flyconfigs_<target>`` holds an ``__init__.py`` with a docstring
only, ``manifest.json`` and one ``artifacts/<file>`` per artifact; the distribution
declares the entry point ``<target> = flyconfigs_<target>`` in ``flyconfigs.artifacts``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from flyconfigs.errors import PublishError
from flyconfigs.schema.canonical import canonical_bytes
from flyconfigs.schema.manifest import MANIFEST_FILE, Manifest, ManifestRow, target_module
from flyconfigs.schema.models import SCHEMA_VERSION, Artifact, is_safe_file_name

__all__ = ["ARTIFACTS_DIR", "distribution_name", "package_files"]

ARTIFACTS_DIR = "artifacts"


def distribution_name(target: str) -> str:
    """``flyconfigs-<target>``."""
    return f"flyconfigs-{target}"


def build_manifest(target: str, artifacts: Sequence[Artifact]) -> tuple[Manifest, dict[str, bytes]]:
    """The manifest for ``artifacts`` and each artifact's file bytes by relative path.

    Rows are sorted by file name, so the same artifacts always give the same manifest.
    Raises :class:`PublishError` if a name is unsafe or two artifacts collide.
    """
    files: dict[str, bytes] = {}
    rows = []
    for artifact in sorted(artifacts, key=lambda a: a.file_name()):
        name = artifact.file_name()
        if not is_safe_file_name(name):
            raise PublishError(f"unsafe artifact file name {name!r}")
        rel = f"{ARTIFACTS_DIR}/{name}"
        data = artifact.to_json_bytes()
        if rel in files:
            raise PublishError(f"two artifacts for the same kernel, device and key ({name})")
        files[rel] = data
        rows.append(
            ManifestRow(
                kernel=artifact.kernel.name,
                key=dict(artifact.key),
                device=artifact.device.identity,
                file=rel,
                sha256=hashlib.sha256(data).hexdigest(),
                schema_version=artifact.schema_version,
            )
        )
    return Manifest(schema_version=SCHEMA_VERSION, target=target, artifacts=rows), files


def package_files(target: str, artifacts: Sequence[Artifact]) -> dict[str, bytes]:
    """Every file of the import package ``flyconfigs_<target>``, by path relative to the
    package's parent folder."""
    module = target_module(target)
    manifest, files = build_manifest(target, artifacts)
    out = {
        f"{module}/__init__.py": f'"""Tuned flyconfigs artifacts for {target} (data only)."""\n'.encode(),
        f"{module}/{MANIFEST_FILE}": canonical_bytes(manifest.model_dump(mode="json")) + b"\n",
    }
    out.update({f"{module}/{rel}": data for rel, data in files.items()})
    return out
