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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypeVar

from flyconfigs.errors import ArtifactError, UnsupportedSchemaVersionError
from flyconfigs.registry.core.axes import KeyValue
from flyconfigs.registry.core.problems import Problem, ProblemKind, ProblemLog
from flyconfigs.registry.core.settings import PACKAGES_ENV, PATH_ENV
from flyconfigs.registry.sources.ownership import TIERS, Owner, Standing
from flyconfigs.schema.canonical import canonical_text
from flyconfigs.schema.jsonio import parse_document, read_file_bytes
from flyconfigs.schema.load import parse_artifact
from flyconfigs.schema.models import Artifact, DeviceIdentity

_Doc = TypeVar("_Doc")

__all__ = [
    "ARTIFACT_GROUP",
    "PACKAGES_ENV",
    "PATH_ENV",
    "Entry",
    "PackageInfo",
    "Source",
    "checked_bytes",
]

ARTIFACT_GROUP = "flyconfigs.artifacts"



@dataclass(frozen=True)
class Source:
    """One source of artifacts, with its rank (lower wins; equal ranks of two packages
    contest a slot) and why it has that rank (``standing``).  A package's standing is
    first found without a family (``chosen``, ``official`` or ``third-party``);
    :meth:`for_family` makes it ``owner`` for the families whose owner claims it."""

    kind: Literal["override", "package"]
    name: str
    rank: tuple[int, int]
    version: str | None = None
    target: str | None = None
    standing: Standing = "override"

    @property
    def tier(self) -> int:
        """The rank's first element: the standing's tier (``FLYCONFIGS_PATH`` 0,
        ``FLYCONFIGS_PACKAGES`` 1, the owner's 2, official 3, third party 4).  A step
        serves a source of a better (lower) tier first, whatever its key's distance."""
        return self.rank[0]

    def describe(self) -> str:
        """``package flyconfigs-sm90 2026.12.3 (official)`` and the like."""
        if self.kind == "override":
            return f"override directory {self.name}"
        why = {"chosen": f"listed in {PACKAGES_ENV}", "owner": "the kernel owner's", "official": "official",
               "third-party": "third party", "override": "override"}[self.standing]
        return f"package {self.name} {self.version} ({why})"

    def for_family(self, owner: Owner) -> Source:
        """This source as it ranks for ``owner``'s family: a package the owner claims
        ranks as ``owner`` unless the user ranked it (``chosen``)."""
        if self.kind == "package" and self.standing in ("official", "third-party") and owner.claims(self.name):
            return replace(self, standing="owner", rank=(TIERS["owner"], 0))
        return self


@dataclass(frozen=True)
class PackageInfo:
    """An installed data package as ``flyconfigs list`` shows it."""

    distribution: str
    version: str
    target: str
    schema_version: str
    artifacts: int
    """The keys it serves: its artifacts and its tables' rows."""
    location: str
    families: tuple[str, ...] = ()
    """The kernel families it serves (its manifest's ``kernels``, or its rows')."""
    files: int = 0
    """Its files of data: artifacts and tables."""
    tables: int = 0
    """How many of :attr:`files` are tables."""
    packs: int = 0
    """How many of :attr:`files` are packs (1.7; each with its measurements file beside it)."""

    def size(self) -> str:
        """``12 artifacts``, or ``155 files (2697 keys: 12 artifacts, 143 tables)``, or
        ``6 files (1569 keys: 6 packs)``."""
        if not self.tables and not self.packs:
            return f"{self.artifacts} artifact{'' if self.artifacts == 1 else 's'}"
        single = self.files - self.tables - self.packs
        parts = [f"{n} {what}{'' if n == 1 else 's'}" for n, what in
                 ((single, "artifact"), (self.tables, "table"), (self.packs, "pack")) if n or what == "artifact" and self.tables]
        return f"{self.files} file{'' if self.files == 1 else 's'} ({self.artifacts} keys: {', '.join(parts)})"


@dataclass
class _File:
    """What loading an entry's file gave, shared by every ranking of the entry."""

    artifact: Artifact | None = None
    failed: bool = False


@dataclass(eq=False)
class Entry:
    """One artifact a source offers, loaded lazily.

    ``location`` is the file's path, or its path relative to ``root`` (a package's
    folder) when ``root`` is set.  ``rule`` and ``created`` (the selection rule and the
    provenance's time), and ``binding``, are known before the file is loaded for an
    override directory's entries (read from the file's tail), else ``None`` until it is.  An entry is never
    changed once made: :meth:`ranked` gives the entry as it ranks for one family, sharing
    the file it loads."""

    kernel: str
    key: dict[str, KeyValue]
    device: DeviceIdentity
    location: str
    source: Source
    sha256: str | None = None
    root: str | None = None
    _artifact: Artifact | None = field(default=None, repr=False)
    _base: Source | None = field(default=None, repr=False)
    rule: str | None = field(default=None, repr=False)
    created: str | None = field(default=None, repr=False)
    _file: _File | None = field(default=None, repr=False)
    binding: tuple[int, str | None] | None = field(default=None, repr=False)
    """The kernel version and source sha256 the file records, when read from its tail
    (an override directory's entries): a stale file is passed over without being read."""

    def __post_init__(self) -> None:
        if self._file is None:
            self._file = _File(self._artifact)
        if self._artifact is not None and self.rule is None:
            self.rule, self.created = self._artifact.selection.rule, self._artifact.provenance.created
        if self._base is None:
            self._base = self.source

    @property
    def path(self) -> Path:
        """The artifact file."""
        return Path(self.root, self.location) if self.root is not None else Path(self.location)

    def base_source(self) -> Source:
        """The source as found, before it was ranked for a family."""
        assert self._base is not None
        return self._base

    def place(self) -> tuple[object, int | None]:
        """Which file this entry comes from (a value equal for entries of one file) and its
        row there: ``None`` for an artifact file, a row index for a table's row."""
        return self.path, None

    def ranked(self, source: Source) -> Entry:
        """This entry as ``source`` (its source ranked for one family) offers it: a new
        entry sharing this one's file, so each file is loaded once."""
        return replace(self, source=source)

    def slot(self) -> tuple[object, ...]:
        """Entries with equal slots (kernel, device identity, key) collide."""
        return (self.kernel, self.device.layers()[0], canonical_text(self.key))

    def predicted(self, problems: ProblemLog) -> bool:
        """Whether the artifact's winner was predicted (loads it when its rule is not
        known yet; an unloadable one is not)."""
        if self.rule is None:
            artifact = self.load(problems)
            return artifact is not None and artifact.selection.rule == "predicted"
        return self.rule == "predicted"

    def load(self, problems: ProblemLog) -> Artifact | None:
        """The artifact, read and checked once; ``None`` (and a problem logged) if bad.
        Safe to call from several threads (at worst a file is read twice)."""
        state = self._file
        assert state is not None
        if state.artifact is not None or state.failed:
            return state.artifact
        try:
            state.artifact = self._read()
        except _Bad as bad:
            state.failed = True
            problems.report(Problem(bad.kind, str(self.path), bad.message, self._distribution()))
        return state.artifact

    def _distribution(self) -> str | None:
        return self.source.name if self.source.kind == "package" else None

    def _read(self) -> Artifact:
        artifact = checked_document(self.path, self.root, self.sha256, parse_artifact)
        if (artifact.kernel.name, artifact.device.identity, artifact.key) != (self.kernel, self.device, self.key):
            raise _Bad("identity-mismatch", "the artifact's kernel, device or key differs from its manifest row"
                        if self.root is not None else "the artifact's kernel, device or key differs from what its "
                        "file's end said when the folder was indexed (the file changed)")
        return artifact


def checked_bytes(path: str | os.PathLike[str], root: str | None, sha256: str | None) -> bytes:
    """The bytes of a source's file, once it is known to lie inside its package's folder
    ``root`` (when given), to exist and be readable, and to match the manifest's
    ``sha256`` (when given); else :class:`_Bad` saying which."""
    if root is not None:
        real, real_root = os.path.realpath(path), os.path.realpath(root)
        if os.path.commonpath([real, real_root]) != real_root:
            raise _Bad("unsafe-path", f"resolves outside its package ({real})")
    try:
        raw = read_file_bytes(path)
    except FileNotFoundError:
        raise _Bad("missing-file", "listed in the manifest but not installed") from None
    except ArtifactError as exc:
        raise _Bad("invalid-artifact", str(exc.problems[0].message)) from None
    if sha256 is not None and (digest := hashlib.sha256(raw).hexdigest()) != sha256:
        raise _Bad("hash-mismatch", f"sha256 {digest} does not match the manifest's {sha256}")
    return raw


def checked_document(path: str | os.PathLike[str], root: str | None, sha256: str | None,
                     parse: Callable[[object, str], tuple[_Doc, object]]) -> _Doc:
    """The document of a source's file (:func:`checked_bytes`), parsed by ``parse`` (the
    schema's ``parse_artifact``, ``parse_table`` or ``parse_pack``); else :class:`_Bad`:
    ``unsupported-major`` for a schema major this version cannot read, ``invalid-artifact``
    naming every problem for one that breaks the schema."""
    raw = checked_bytes(path, root, sha256)
    try:
        document, _ = parse(parse_document(raw, str(path), schema_bounds_depth=True), str(path))
    except UnsupportedSchemaVersionError as exc:
        raise _Bad("unsupported-major", str(exc.problems[0].message)) from None
    except ArtifactError as exc:
        raise _Bad("invalid-artifact", "; ".join(str(p) for p in exc.problems)) from None
    return document


class _Bad(Exception):
    def __init__(self, kind: ProblemKind, message: str) -> None:
        super().__init__(message)
        self.kind: ProblemKind = kind
        self.message = message
