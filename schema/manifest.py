"""The manifest of a data package: one row per artifact file it ships.

A loader answers "does this package have an artifact for kernel K, key k, device d?"
from the manifest alone, and opens an artifact file only when a lookup needs it,
checking the row's sha256 against the file's bytes.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from flyconfigs.schema.canonical import canonical_text
from flyconfigs.schema.models import Count, DeviceIdentity, KernelName, Key, Name, SchemaVersion, Sha256, _Model

__all__ = ["MANIFEST_FILE", "Manifest", "ManifestRow", "ManifestTable"]

MANIFEST_FILE = "manifest.json"

RelPath = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}(/[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}){0,3}$")
]
"""A relative POSIX path inside the package: no segment starts with ``.`` (so no ``..``),
no leading ``/``, at most four segments."""

_ROW_LIMIT = 100_000


def _is_empty(value: object) -> bool:
    return value == []


class ManifestRow(_Model):
    """One artifact of the package and where to find it."""

    kernel: KernelName
    key: Key
    device: DeviceIdentity
    file: RelPath
    sha256: Sha256
    schema_version: SchemaVersion

    def slot(self) -> tuple[object, ...]:
        """(kernel, device identity, key) as a hashable value: rows with equal slots collide."""
        return (self.kernel, self.device.layers()[0], canonical_text(self.key))


class ManifestTable(_Model):
    """One table of the package (1.6), or one pack (1.7, in ``packs``): its kernel and
    device, where to find it, and how many rows it holds.  Its keys are not listed: a
    loader reads a table or a pack only when its kernel is resolved on its device."""

    kernel: KernelName
    device: DeviceIdentity
    file: RelPath
    sha256: Sha256
    schema_version: SchemaVersion
    rows: Count
    """How many rows: at least one in ``tables`` and ``packs``, none in ``kept``."""


class Manifest(_Model):
    """A data package's table of contents.

    ``kernels`` (1.5) names the kernel families the package's artifacts serve, sorted:
    exactly the rows' kernels.  A manifest written before 1.5 omits it, and a reader
    gathers the families from the rows.  ``tables`` (1.6) lists the package's tables
    and ``packs`` (1.7) its packs; their kernels are not in ``kernels``, so that an
    older reader, which ignores them, still reads the rest of the package."""

    schema_version: SchemaVersion
    target: Name
    artifacts: Annotated[list[ManifestRow], Field(max_length=_ROW_LIMIT)]
    kernels: Annotated[list[KernelName], Field(max_length=_ROW_LIMIT)] | None = None
    tables: Annotated[list[ManifestTable], Field(max_length=_ROW_LIMIT, exclude_if=_is_empty)] = []
    packs: Annotated[list[ManifestTable], Field(max_length=_ROW_LIMIT, exclude_if=_is_empty)] = []
    """The package's packs (1.7): each the served part of many artifacts of one kernel and
    device, its measurements file named inside it (and hashed there)."""
    kept: Annotated[list[ManifestTable], Field(max_length=_ROW_LIMIT, exclude_if=_is_empty)] = []
    """The package's tables of no rows (1.8): upstream files that hold no config, kept so
    that an export gives them back.  They serve nothing; an older reader ignores them."""

    def families(self) -> list[str]:
        """The kernel families this package serves (its artifacts' and its tables'), sorted."""
        mine = list(self.kernels) if self.kernels is not None else sorted({row.kernel for row in self.artifacts})
        return sorted({*mine, *(table.kernel for table in (*self.tables, *self.packs))})

    @model_validator(mode="after")
    def _kernels_are_the_rows(self) -> Manifest:
        if self.kernels is not None:
            served = sorted({row.kernel for row in self.artifacts})
            if self.kernels != served:
                raise ValueError(f"kernels: {self.kernels!r} must be the rows' kernels, sorted: {served!r}")
        return self

    @model_validator(mode="after")
    def _rows_unique(self) -> Manifest:
        seen_files: set[str] = set()
        seen_slots: dict[tuple[object, ...], int] = {}
        for index, row in enumerate(self.artifacts):
            if row.file in seen_files:
                raise ValueError(f"artifacts[{index}].file: {row.file!r} is listed twice")
            seen_files.add(row.file)
            slot = row.slot()
            if slot in seen_slots:
                raise ValueError(
                    f"artifacts[{index}]: duplicate row for kernel {row.kernel!r}, the same device "
                    f"and key as artifacts[{seen_slots[slot]}]"
                )
            seen_slots[slot] = index
        for what, listed in (("tables", self.tables), ("packs", self.packs), ("kept", self.kept)):
            for index, table in enumerate(listed):
                if (table.rows == 0) != (what == "kept"):
                    raise ValueError(f"{what}[{index}].rows: {table.rows}: a table or a pack has rows, a kept table none")
                if table.file in seen_files:
                    raise ValueError(f"{what}[{index}].file: {table.file!r} is listed twice")
                seen_files.add(table.file)
        return self


def target_module(target: str) -> str:
    """The import-package name of ``flyconfigs-<target>``: ``flyconfigs_<target>``."""
    return "flyconfigs_" + re.sub(r"[^a-z0-9]", "_", target.lower())
