"""Where artifacts come from: override directories and installed data packages.

Each source yields :class:`Entry` rows — kernel, key, device identity, file — without
necessarily reading the artifact: a data package's rows come from its manifest, and its
artifact files are read (and their sha256 checked) by :meth:`Entry.load` on first use.

Discovery reads the entry-point group ``flyconfigs.artifacts`` and the distribution's own
files through :mod:`importlib.metadata`; it never imports a data package.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Literal

from packaging.utils import canonicalize_name

from flyconfigs.errors import ArtifactError, FieldProblem, UnsupportedSchemaVersionError
from flyconfigs.registry.problems import Problem, ProblemKind, ProblemLog
from flyconfigs.schema.jsonio import MAX_DOCUMENT_BYTES, parse_document, read_document
from flyconfigs.schema.load import parse_artifact, parse_manifest
from flyconfigs.schema.manifest import MANIFEST_FILE
from flyconfigs.schema.models import Artifact, DeviceIdentity
from flyconfigs.schema.versions import CURRENT_MAJOR, parse_version

__all__ = [
    "ARTIFACT_GROUP",
    "PATH_ENV",
    "Entry",
    "LoadedPackage",
    "PackageInfo",
    "PackageRef",
    "Source",
    "find_packages",
    "load_package",
    "override_directories",
    "scan_directory",
]

ARTIFACT_GROUP = "flyconfigs.artifacts"
PATH_ENV = "FLYCONFIGS_PATH"


@dataclass(frozen=True)
class Source:
    """One source of artifacts, with its rank (lower wins a collision)."""

    kind: Literal["override", "package"]
    name: str
    rank: int
    version: str | None = None
    target: str | None = None


@dataclass(frozen=True)
class PackageInfo:
    """An installed data package as ``flyconfigs list`` shows it."""

    distribution: str
    version: str
    target: str
    schema_version: str
    artifacts: int
    location: str


@dataclass(eq=False)
class Entry:
    """One artifact a source offers, loaded lazily.

    ``location`` is the file's path, or its path relative to ``root`` (a package's
    folder) when ``root`` is set."""

    kernel: str
    key: dict[str, int | str]
    device: DeviceIdentity
    location: str
    source: Source
    sha256: str | None = None
    root: str | None = None
    _artifact: Artifact | None = field(default=None, repr=False)
    _failed: bool = field(default=False, repr=False)

    @property
    def path(self) -> Path:
        """The artifact file."""
        return Path(self.root, self.location) if self.root is not None else Path(self.location)

    def slot(self) -> tuple[object, ...]:
        """Entries with equal slots (kernel, device identity, key) collide."""
        return (self.kernel, self.device.layers()[0], tuple(sorted(self.key.items())))

    def load(self, problems: ProblemLog) -> Artifact | None:
        """The artifact, read and checked once; ``None`` (and a problem logged) if bad."""
        if self._artifact is not None or self._failed:
            return self._artifact
        try:
            self._artifact = self._read()
        except _Bad as bad:
            self._failed = True
            problems.report(Problem(bad.kind, str(self.path), bad.message, self._distribution()))
        return self._artifact

    def _distribution(self) -> str | None:
        return self.source.name if self.source.kind == "package" else None

    def _read(self) -> Artifact:
        if self.root is not None:
            real = os.path.realpath(self.path)
            root = os.path.realpath(self.root)
            if os.path.commonpath([real, root]) != root:
                raise _Bad("unsafe-path", f"resolves outside its package ({real})")
        try:
            if self.path.stat().st_size > MAX_DOCUMENT_BYTES:
                raise _Bad("invalid-artifact", f"over the size limit of {MAX_DOCUMENT_BYTES} bytes")
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raise _Bad("missing-file", "listed in the manifest but not installed") from None
        except OSError as exc:
            raise _Bad("missing-file", f"cannot read: {exc.strerror or exc}") from None
        if self.sha256 is not None:
            digest = hashlib.sha256(raw).hexdigest()
            if digest != self.sha256:
                raise _Bad("hash-mismatch", f"sha256 {digest} does not match the manifest's {self.sha256}")
        try:
            artifact, _ = parse_artifact(parse_document(raw, str(self.path)), str(self.path))
        except UnsupportedSchemaVersionError as exc:
            raise _Bad("unsupported-major", str(exc.problems[0].message)) from None
        except ArtifactError as exc:
            raise _Bad("invalid-artifact", "; ".join(str(p) for p in exc.problems)) from None
        if (artifact.kernel.name, artifact.device.identity, artifact.key) != (self.kernel, self.device, self.key):
            raise _Bad("identity-mismatch", "the artifact's kernel, device or key differs from its manifest row")
        return artifact


class _Bad(Exception):
    def __init__(self, kind: ProblemKind, message: str) -> None:
        super().__init__(message)
        self.kind: ProblemKind = kind
        self.message = message


def override_directories(value: str | None = None) -> list[Path]:
    """The directories of ``FLYCONFIGS_PATH`` (``os.pathsep``-separated), in order."""
    text = os.environ.get(PATH_ENV, "") if value is None else value
    return [Path(p) for p in text.split(os.pathsep) if p]


def scan_directory(folder: Path, rank: int, problems: ProblemLog) -> list[Entry]:
    """Every valid artifact under ``folder`` (``*.json``, recursively, dot-files skipped);
    invalid ones are reported and skipped."""
    source = Source("override", str(folder), rank)
    entries: list[Entry] = []
    if not folder.is_dir():
        return entries
    for path in sorted(folder.rglob("*.json")):
        if any(part.startswith(".") for part in path.relative_to(folder).parts):
            continue
        try:
            artifact, _ = parse_artifact(read_document(path), str(path))
        except UnsupportedSchemaVersionError as exc:
            problems.report(Problem("unsupported-major", str(path), exc.problems[0].message))
            continue
        except ArtifactError as exc:
            problems.report(Problem("invalid-artifact", str(path), "; ".join(str(p) for p in exc.problems)))
            continue
        entries.append(
            Entry(artifact.kernel.name, dict(artifact.key), artifact.device.identity, str(path), source, _artifact=artifact)
        )
    return entries


@dataclass(frozen=True)
class PackageRef:
    """An installed data package found through its entry point, manifest not yet read."""

    distribution: str
    target: str
    rank: int
    entry_point: metadata.EntryPoint
    dist: metadata.Distribution


@dataclass
class LoadedPackage:
    """A data package whose manifest was read: what ``list`` shows, and its rows."""

    info: PackageInfo
    entries: list[Entry]


def find_packages(first_rank: int = 0) -> list[PackageRef]:
    """Installed data packages (entry-point group ``flyconfigs.artifacts``), ordered by
    normalized distribution name — the precedence among packages.  Reads metadata only."""
    found = []
    for ep in metadata.entry_points(group=ARTIFACT_GROUP):
        dist = ep.dist
        if dist is None:
            continue
        name = dist.metadata["Name"] or "?"
        found.append((canonicalize_name(name), name, ep, dist))
    found.sort(key=lambda item: item[0])
    return [PackageRef(name, ep.name, first_rank + i, ep, dist) for i, (_, name, ep, dist) in enumerate(found)]


def load_package(ref: PackageRef, problems: ProblemLog) -> LoadedPackage | None:
    """Read ``ref``'s manifest into entries; a broken package is reported and ``None``."""
    dist_name, ep, dist = ref.distribution, ref.entry_point, ref.dist
    module = ep.value.split(":")[0].strip()
    package_dir = Path(str(dist.locate_file(module.replace(".", "/"))))
    manifest_path = package_dir / MANIFEST_FILE
    try:
        data = read_document(manifest_path)
        if not isinstance(data, dict):
            raise ArtifactError(str(manifest_path), [FieldProblem("", "expected a JSON object")])
        major, _ = parse_version(data.get("schema_version"), str(manifest_path))
        if major != CURRENT_MAJOR:
            problems.report(
                Problem(
                    "unsupported-major",
                    str(manifest_path),
                    f"manifest schema {data.get('schema_version')!r}; this flyconfigs reads major {CURRENT_MAJOR}",
                    dist_name,
                )
            )
            return None
        manifest = parse_manifest(data, str(manifest_path))
    except ArtifactError as exc:
        problems.report(Problem("invalid-manifest", str(manifest_path), "; ".join(map(str, exc.problems)), dist_name))
        return None
    if manifest.target != ep.name:
        problems.report(
            Problem(
                "wrong-target",
                str(manifest_path),
                f"manifest target {manifest.target!r} differs from the entry point's {ep.name!r}",
                dist_name,
            )
        )
        return None
    source = Source("package", dist_name, ref.rank, dist.version, manifest.target)
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
    info = PackageInfo(dist_name, dist.version, manifest.target, manifest.schema_version, len(entries), root)
    return LoadedPackage(info, entries)
