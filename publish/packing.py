"""Packing a folder of artifacts into the pack form (schema 1.7), and back.

:func:`pack_folder` turns the artifacts of a folder (single 1.x files and the rows of the
packs already there, a single file replacing a packed row of the same kernel, device and
key: a new tuning replaces the old) into one pack per kernel, device, key axes and
selection rule, each with its measurements file (:mod:`flyconfigs.schema.pack`).  Every
row is read back and compared with the artifact it was made from before anything is
written (:func:`~flyconfigs.schema.pack.difference`); then the packs are written
atomically and the files they replace removed.  An artifact that cannot be a row (a key
holding a list, candidates labelled only in part) stays a single file.
:func:`unpack_folder` writes every row of a folder's packs out as its 1.x artifact.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flyconfigs.errors import ArtifactError, PublishError
from flyconfigs.schema.json_schema import SINCE
from flyconfigs.schema.jsonio import read_document, write_atomic
from flyconfigs.schema.load import parse_pack
from flyconfigs.schema.models import Artifact
from flyconfigs.schema.pack import (
    Pack,
    difference,
    is_pack_file,
    measurements_bytes,
    pack_artifacts,
    packable,
    read_artifacts,
    slot_of,
)

__all__ = ["PackResult", "pack_folder", "read_folder", "unpack_folder"]


@dataclass(frozen=True)
class PackResult:
    """What :func:`pack_folder` did: the pack files written, how many rows and
    candidates they hold, and the files removed (single artifacts now packed, and packs
    rewritten under another name)."""

    written: tuple[Path, ...]
    rows: int
    candidates: int
    removed: tuple[Path, ...]
    single: tuple[Path, ...]
    """Artifacts left as single files (they cannot be a pack row)."""


def read_folder(folder: Path) -> tuple[dict[str, tuple[Artifact, Path]], list[Path]]:
    """:func:`flyconfigs.schema.pack.read_artifacts`, a bad file a :class:`PublishError`."""
    try:
        return read_artifacts(folder)
    except ArtifactError as exc:
        raise PublishError(f"invalid: {'; '.join(map(str, exc.problems))}", exc.file) from None


PACK_VERSION = SINCE["pack"]
"""The schema version packs are written at unless asked otherwise."""


def pack_folder(folder: Path, schema_version: str = PACK_VERSION) -> PackResult:
    """Pack the artifacts of ``folder`` in place (see the module's docstring), written at
    ``schema_version`` (by default the version that brought the pack form, the oldest
    that reads a pack: no later version adds to one, so older readers keep reading
    what is republished); raises
    :class:`PublishError` naming the first artifact a pack would not give back, before
    anything is written."""
    found, old_packs = read_folder(folder)
    rows = [(a, p) for a, p in found.values() if packable(a)]
    single = tuple(sorted(p for a, p in found.values() if not packable(a)))
    packs = pack_artifacts([a for a, _ in rows], schema_version)
    origin = {slot_of(a): a for a, _ in rows}
    files: dict[Path, bytes] = {}
    for pack, measurements in packs:
        for i in range(len(pack.rows)):
            back = pack.artifact(i, measurements)
            why = difference(origin[slot_of(back)], back)
            if why is not None:
                raise PublishError(f"{back.file_name()}: packed, it would read back otherwise ({why})", str(folder))
        files[folder / pack.file_name()] = pack.to_json_bytes()
        files[folder / pack.measurements.file] = measurements_bytes(measurements)
    for path, data in sorted(files.items()):
        write_atomic(path, data)
    consumed = {p for _, p in rows if not is_pack_file(p)} | set(old_packs)
    removed = tuple(sorted(p for p in consumed if p not in files))
    for path in removed:
        path.unlink()
    return PackResult(tuple(sorted(p for p in files if p.suffix == ".json")), sum(len(p.rows) for p, _ in packs),
                      sum(p.measurements.candidates for p, _ in packs), removed, single)


def unpack_folder(folder: Path, out: Path) -> list[Path]:
    """Write every row of ``folder``'s packs into ``out`` as the 1.x artifact it was made
    from (its candidates' timings as the pack keeps them), named as the tuner names it;
    the written paths."""
    found, _ = read_folder(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for artifact, path in found.values():
        if is_pack_file(path):
            written.append(write_atomic(out / artifact.file_name(), artifact.to_json_bytes()))
    return sorted(written)


def pack_of(path: Path) -> Pack:
    """The pack at ``path``, validated."""
    return parse_pack(read_document(path, schema_bounds_depth=True), str(path))[0]
