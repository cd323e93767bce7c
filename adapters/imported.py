"""What every importer shares: the result of importing one file, the artifact an upstream
config becomes (``selection: imported``, no timing, its source recorded), and writing it
without replacing what says more."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from flyconfigs.errors import ArtifactError, FieldProblem, InvalidKeyError
from flyconfigs.registry.checks.check import refusal
from flyconfigs.registry.checks.replacing import replacement_refusal
from flyconfigs.registry.declarations import KernelDecl, check_key
from flyconfigs.schema.jsonio import write_atomic
from flyconfigs.schema.load import parse_artifact
from flyconfigs.schema.models import SCHEMA_VERSION, Artifact, Device
from flyconfigs.schema.table import Table

__all__ = ["Imported", "UpstreamFile", "imported_artifact", "write_imported"]


@dataclass(frozen=True)
class UpstreamFile:
    """Where a file comes from: its project (``owner/name`` on GitHub), its path there and,
    when the importer was told, the revision it was taken at."""

    project: str
    path: str
    revision: str | None = None

    @property
    def url(self) -> str | None:
        """The file's address at ``revision`` on GitHub, or ``None`` without a revision."""
        if self.revision is None:
            return None
        return f"https://github.com/{self.project}/blob/{quote(self.revision, safe='')}/{quote(self.path, safe='/=,')}"


@dataclass
class Imported:
    """One file's import: the artifacts made, the tables made (schema 1.6: many of its
    entries in one document), each entry refused with the file, the entry and the
    field that could not be represented, and the file's text where the importer kept it
    (to record its spelling in a table, :func:`flyconfigs.adapters.vllm.tabulated`)."""

    file: str
    artifacts: list[Artifact] = field(default_factory=list)
    refused: list[ArtifactError] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    text: str | None = None


def imported_artifact(decl: KernelDecl, device: Device, key: Mapping[str, object], config: Mapping[str, object], *,
                      upstream: UpstreamFile, entry: str, device_from: str, tool: str, backend: str,
                      reported: Mapping[str, object] | None = None, backend_versions: Mapping[str, str] | None = None,
                      file: str, field: str) -> Artifact:
    """The artifact of one upstream config: one ``ok`` candidate without a timing (the
    upstream measured it under its own protocol, flyconfigs did not), the winner, and the
    source.

    Raises :class:`ArtifactError` naming ``file`` and ``field`` (where the entry is in
    it) for a key the kernel refuses and for a winner the loader would not serve, by the
    rule ``validate`` applies (:func:`~flyconfigs.registry.checks.check.refusal`), and for a
    value the schema refuses (naming the field, once for the candidate and the winner)."""
    try:
        key = check_key(decl, key)
    except InvalidKeyError as exc:
        raise ArtifactError(file, [FieldProblem(field, str(exc))]) from None
    data = {
        "schema_version": SCHEMA_VERSION,
        "kernel": {"name": decl.name, "version": decl.version, "source_sha256": None},
        "device": device.model_dump(mode="json"),
        "key": dict(key),
        "candidates": [{"config": dict(config), "status": "ok"}],
        "winner": {"config": dict(config)},
        "selection": {"rule": "imported"},
        "provenance": {
            "tool": tool,
            "backend": backend,
            "backend_versions": dict(backend_versions or {}),
            "source": {
                "project": upstream.project,
                "file": upstream.path,
                "entry": entry,
                "revision": upstream.revision,
                "url": upstream.url,
                "device_from": device_from,
                "reported": dict(reported or {}),
            },
        },
    }
    try:
        artifact = parse_artifact(data, file)[0]
    except ArtifactError as exc:
        # The config is both the candidate's and the winner's: a value the schema refuses
        # is one problem of this entry, said once under the entry's field.
        said = dict.fromkeys(f"{p.field.removeprefix('candidates[0].').removeprefix('winner.')}: {p.message}"
                             for p in exc.problems)
        raise ArtifactError(file, [FieldProblem(field, message) for message in said]) from None
    refused = refusal(decl, artifact, key, None)
    if refused is not None:
        raise ArtifactError(file, [FieldProblem(field, f"{decl.name} cannot serve it: {refused[1]}")])
    return artifact


def write_imported(artifact: Artifact, folder: str | Path) -> Path:
    """Write an imported ``artifact`` into ``folder`` under its own file name
    (atomically); return the path.

    An import never replaces what says more than it does: a file of that name holding a
    measured or predicted artifact, or one of a newer schema (whose label this
    flyconfigs may not know), is not overwritten (:class:`ArtifactError` naming it), so
    importing cannot turn that slot's label into ``imported`` nor lose its candidates
    and provenance (:func:`flyconfigs.registry.replacement_refusal`, by ``artifact``'s
    own selection rule: a measurement a T4 file holds replaces an import).  An earlier
    import, or a file that is not an artifact, is replaced.  The write of every importer
    (:func:`flyconfigs.adapters.importing.write_imports`)."""
    target = Path(folder) / artifact.file_name()
    payload = artifact.to_json_bytes()
    why = replacement_refusal(target, artifact.selection.rule)
    if why is not None:
        field = "schema_version" if "schema" in why else "selection.rule"
        raise ArtifactError(str(target), [FieldProblem(field, why)])
    return write_atomic(target, payload)
