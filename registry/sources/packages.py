"""Installed data packages: found through the entry-point group ``flyconfigs.artifacts``
(metadata only), ranked by the user's ``FLYCONFIGS_PACKAGES`` and by name only as
official (``flyconfigs-<target>``) or third party, and read from their manifests into
entries (artifact files not yet read).  A data package's code is never imported."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from flyconfigs.errors import ArtifactError, FieldProblem, UnsupportedSchemaVersionError
from flyconfigs.registry.core.environment import Environment
from flyconfigs.registry.core.names import canonical_name
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.core.settings import Settings, read_settings
from flyconfigs.registry.sources.entries import ARTIFACT_GROUP, PACKAGES_ENV, Entry, PackageInfo, Source
from flyconfigs.registry.sources.ownership import TIERS, Standing, is_official
from flyconfigs.schema.jsonio import read_document
from flyconfigs.schema.load import parse_manifest

if TYPE_CHECKING:
    from flyconfigs.schema.manifest import ManifestTable

__all__ = ["LoadedPackage", "PackageRef", "chosen_packages", "find_packages", "load_package", "package_folder",
           "read_package_folder"]

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class PackageRef:
    """An installed data package found through its entry point, manifest not yet read."""

    distribution: str
    target: str
    rank: tuple[int, int]
    entry_point: metadata.EntryPoint
    dist: metadata.Distribution
    standing: Standing = "third-party"


@dataclass
class LoadedPackage:
    """A data package whose manifest was read: what ``list`` shows, and its rows."""

    info: PackageInfo
    entries: list[Entry]
    source: Source | None = None
    tables: list[ManifestTable] = field(default_factory=list)
    """The tables its manifest lists (1.6), of its target; read when their kernel is resolved."""
    packs: list[ManifestTable] = field(default_factory=list)
    """The packs its manifest lists (1.7), of its target; read as its tables are."""


def chosen_packages(settings: Settings | None = None) -> list[str]:
    """The distributions ``FLYCONFIGS_PACKAGES`` ranks first, normalized, in order."""
    value = (settings if settings is not None else read_settings()).packages
    return [canonical_name(p) for p in value.split(",") if p.strip()]


def find_packages(problems: ProblemLog | None = None, environment: Environment | None = None) -> list[PackageRef]:
    """Installed data packages (entry-point group ``flyconfigs.artifacts``): those
    ``FLYCONFIGS_PACKAGES`` lists, in its order (standing ``chosen``), then the others in
    the order ``sys.path`` gives them, each ``official`` (``flyconfigs-<target>``) or
    ``third-party``; a name never ranks one above another.  Reads metadata only; a
    distribution whose metadata is broken is reported and skipped.  ``environment``: the
    snapshot to read the setting and the entry points from (default: read them now)."""
    env = environment if environment is not None else Environment()
    chosen = chosen_packages(env.settings)
    found = []
    log = problems if problems is not None else ProblemLog()
    items = env.entry_points(ARTIFACT_GROUP, log)
    installed = {canonical_name(item.distribution) for item in items}
    for name in chosen:
        if name not in installed:
            log.report(Problem("bad-setting", PACKAGES_ENV, f"names {name!r}, which is not an installed data package "
                                                            f"(entry-point group {ARTIFACT_GROUP}); ignored"))
    for item in items:
        norm = canonical_name(item.distribution)
        if norm in chosen:
            standing: Standing = "chosen"
            rank = (TIERS["chosen"], chosen.index(norm))
        else:
            standing = "official" if is_official(item.distribution, item.entry_point.name) else "third-party"
            rank = (TIERS[standing], 0)
        found.append(PackageRef(item.distribution, item.entry_point.name, rank, item.entry_point, item.dist, standing))
    return sorted(found, key=lambda ref: ref.rank)


def package_folder(ref: PackageRef) -> Path:
    """The folder of ``ref``'s import package, proven to lie inside the distribution's
    own install location; :class:`ArtifactError` if the entry point names anything but
    a module (an absolute path, ``..``) or leads outside."""
    value = ref.entry_point.value.split(":")[0].strip()
    where = f"entry point {ref.entry_point.name} = {ref.entry_point.value!r} of {ref.distribution}"
    if not _MODULE.match(value):
        raise ArtifactError(where, [FieldProblem("value", "must name an import package (dotted identifiers)")])
    base = os.path.realpath(str(ref.dist.locate_file("")))
    folder = os.path.realpath(str(ref.dist.locate_file(value.replace(".", "/"))))
    if os.path.commonpath([folder, base]) != base:
        raise ArtifactError(where, [FieldProblem("value", f"leads outside the distribution's location ({folder})")])
    return Path(folder)


def load_package(ref: PackageRef, problems: ProblemLog) -> LoadedPackage | None:
    """Read ``ref``'s manifest into entries; a broken package is reported and ``None``."""
    try:
        package_dir = package_folder(ref)
    except ArtifactError as exc:
        problems.report(Problem("unsafe-path", exc.file, str(exc.problems[0].message), ref.distribution))
        return None
    source = Source("package", ref.distribution, ref.rank, ref.dist.version, ref.target, ref.standing)
    return read_package_folder(package_dir, ref.target, source, problems)


def read_package_folder(package_dir: Path, target: str | None, source: Source, problems: ProblemLog) -> LoadedPackage | None:
    """The manifest of the data package in ``package_dir`` as entries (artifact files
    not yet read), under exactly the loader's rules: the version rule, the manifest's
    target equal to ``target`` (when given) and every row's device of that target.  A
    broken manifest is reported and ``None``; a bad row is reported and skipped."""
    # Imported when a package is first read: a resolve from FLYCONFIGS_PATH alone does
    # without the manifest's models.
    from flyconfigs.schema.manifest import MANIFEST_FILE

    dist_name = source.name if source.kind == "package" else None
    manifest_path = package_dir / MANIFEST_FILE
    try:
        manifest = parse_manifest(read_document(manifest_path, schema_bounds_depth=True), str(manifest_path))
    except UnsupportedSchemaVersionError as exc:
        problems.report(Problem("unsupported-major", str(manifest_path), exc.problems[0].message, dist_name))
        return None
    except ArtifactError as exc:
        problems.report(Problem("invalid-manifest", str(manifest_path), "; ".join(map(str, exc.problems)), dist_name))
        return None
    if target is not None and manifest.target != target:
        problems.report(
            Problem(
                "wrong-target",
                str(manifest_path),
                f"manifest target {manifest.target!r} differs from the entry point's {target!r}",
                dist_name,
            )
        )
        return None
    root = str(package_dir)
    entries = []
    for index, row in enumerate(manifest.artifacts):
        if row.device.arch != manifest.target:
            problems.report(
                Problem(
                    "wrong-target",
                    f"{manifest_path}#artifacts[{index}]",
                    f"device arch {row.device.arch!r} does not belong to target {manifest.target!r}",
                    dist_name,
                )
            )
            continue
        entries.append(Entry(row.kernel, row.key, row.device, row.file, source, row.sha256, root))
    tables: list[ManifestTable] = []
    packs: list[ManifestTable] = []
    # A kept table (1.8, no rows) is read as a table: it serves nothing, and an export gives its file back.
    for what, listed, kept in (("tables", manifest.tables, tables), ("kept", manifest.kept, tables),
                               ("packs", manifest.packs, packs)):
        for index, table in enumerate(listed):
            if table.device.arch != manifest.target:
                problems.report(Problem("wrong-target", f"{manifest_path}#{what}[{index}]", f"device arch "
                                        f"{table.device.arch!r} does not belong to target {manifest.target!r}",
                                        dist_name))
                continue
            kept.append(table)
    info = PackageInfo(source.name, source.version or "", manifest.target, manifest.schema_version,
                       len(entries) + sum(t.rows for t in (*tables, *packs)), root, tuple(manifest.families()),
                       len(entries) + len(tables) + len(packs), len(tables), len(packs))
    return LoadedPackage(info, entries, source, tables, packs)
