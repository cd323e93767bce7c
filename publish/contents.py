"""What a data package holds: the artifacts and tables of a folder, checked as the loader
would read them, its notice, and the README that describes them.

A folder may hold a ``NOTICE`` file (plain UTF-8 text): where imported configs came from
and under which licence (aiter's MIT, vLLM's Apache-2.0).  It ships in the package beside
the manifest and closes the README.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flyconfigs.errors import ArtifactError, PublishError
from flyconfigs.registry.checks.check import winner_refusal
from flyconfigs.schema.canonical import canonical_text, sha256_hex
from flyconfigs.schema.jsonio import MAX_DOCUMENT_BYTES, json_files_under, read_document, read_file_bytes
from flyconfigs.schema.load import parse_artifact, parse_measurements, parse_pack, parse_table, refuse_if_partial
from flyconfigs.schema.models import Artifact
from flyconfigs.schema.pack import Pack, is_pack_document, parse_measurements_bytes
from flyconfigs.schema.table import Table, is_table_document

__all__ = ["NOTICE_FILE", "Contents", "collect", "describe"]

NOTICE_FILE = "NOTICE"


@dataclass
class Contents:
    """A package's artifacts, tables and notice."""

    artifacts: list[Artifact] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notice: str | None = None
    packs: list[tuple[Pack, bytes]] = field(default_factory=list)
    """Each pack (1.7) with its measurements file's bytes, checked against the pack."""

    @property
    def count(self) -> int:
        """How many keys it serves: its artifacts and its tables' and packs' rows."""
        return len(self.artifacts) + sum(len(t.rows) for t in self.tables) + sum(len(p.rows) for p, _ in self.packs)

    def served(self) -> list[Artifact]:
        """Its artifacts and each pack row as the artifact that serves."""
        return self.artifacts + [Artifact.model_validate(p.row_artifact_data(i))
                                 for p, _ in self.packs for i in range(len(p.rows))]


def collect(folder: Path, target: str) -> Contents:
    """Every artifact and table under ``folder``, validated, and its ``NOTICE``; raises
    :class:`PublishError` naming the file for an invalid one, one a test double made, one
    of another target, one whose winner (a row's, for a table) its declared kernel
    refuses (stale, or a config it cannot run), two that collide, one of a newer schema minor with fields this
    flyconfigs does not know (republished, it would keep its label and lose them), or a
    folder with neither."""
    if not folder.is_dir():
        raise PublishError("not a folder of artifacts", str(folder))
    found: dict[str, Path] = {}
    out = Contents()
    for path in json_files_under(folder):
        try:
            data = read_document(path, schema_bounds_depth=True)
            if is_table_document(data):
                table, report = parse_table(data, str(path))
                refuse_if_partial(report, table.schema_version, "republish it")
                item: Artifact | Table | Pack = table
            elif is_pack_document(data):
                pack, report = parse_pack(data, str(path))
                refuse_if_partial(report, pack.schema_version, "republish it")
                item = pack
            else:
                artifact, report = parse_artifact(data, str(path))
                refuse_if_partial(report, artifact.schema_version, "republish it")
                item = artifact
        except ArtifactError as exc:
            raise PublishError(f"invalid artifact: {'; '.join(map(str, exc.problems))}", str(path)) from None
        if isinstance(item, Pack):
            out.packs.append((item, _measurements_of(item, path)))
        if isinstance(item, Artifact) and item.from_test_double:
            raise PublishError("made by a test double (backend simulated); only measured, predicted or imported "
                               "artifacts are published", str(path))
        if item.device.arch != target:
            raise PublishError(f"belongs to {item.device.arch!r}, not to target {target!r}", str(path))
        why = _refused_winner(item)
        if why is not None:
            raise PublishError(f"the loader would never serve its winner: {why}", str(path))
        name = item.file_name()
        if name in found:
            what = "same kernel, device and key" if isinstance(item, Artifact) else "same kernel, device and upstream file"
            raise PublishError(f"collides with {found[name]} ({what})", str(path))
        found[name] = path
        if isinstance(item, Table):
            out.tables.append(item)
        elif isinstance(item, Artifact):
            out.artifacts.append(item)
    _refuse_packed_twice(out)
    if not found:
        raise PublishError("no artifacts found", str(folder))
    notice = folder / NOTICE_FILE
    if notice.is_file():
        try:
            out.notice = read_file_bytes(notice, 64 * 1024).decode("utf-8")
        except (ArtifactError, UnicodeDecodeError) as exc:
            raise PublishError(f"cannot read {NOTICE_FILE}: {exc}", str(folder)) from None
    return out


def _measurements_of(pack: Pack, path: Path) -> bytes:
    """The bytes of ``pack``'s measurements file beside ``path``, once they are the
    pack's (its sha256) and valid measurements of its rows; :class:`PublishError` naming
    the file otherwise."""
    where = path.parent / pack.measurements.file
    try:
        raw = read_file_bytes(where, MAX_DOCUMENT_BYTES)
        if sha256_hex(raw) != pack.measurements.sha256:
            raise PublishError("its sha256 is not the one its pack names (changed since the pack was made)", str(where))
        found, report = parse_measurements(parse_measurements_bytes(raw, str(where), MAX_DOCUMENT_BYTES), str(where))
        refuse_if_partial(report, found.schema_version, "republish it")
    except ArtifactError as exc:
        raise PublishError(f"invalid measurements: {'; '.join(map(str, exc.problems))}", str(where)) from None
    if (found.kernel, found.device) != (pack.kernel.name, pack.device.identity) or \
            list(found.counts) != [r.candidates for r in pack.served]:
        raise PublishError(f"not the measurements of {path.name}'s kernel, device and rows", str(where))
    return raw


def _refuse_packed_twice(contents: Contents) -> None:
    """:class:`PublishError` when two of a folder's artifacts and pack rows are one key
    of one kernel on one device."""
    seen: dict[tuple[str, str, str], str] = {}
    items = [(a.kernel.name, a.device.identity, dict(a.key), a.file_name()) for a in contents.artifacts]
    items += [(p.kernel.name, p.device.identity, p.key_of(i), p.file_name())
              for p, _ in contents.packs for i in range(len(p.rows))]
    for kernel, device, key, name in items:
        slot = (kernel, canonical_text(device.model_dump(mode="json")), canonical_text(key))
        if slot in seen:
            raise PublishError(f"{name} and {seen[slot]} both hold {kernel} {key} for one device")
        seen[slot] = name


def _refused_winner(item: Artifact | Table | Pack) -> str | None:
    """Why the loader would refuse the winner of ``item`` (of any row of a table, named by
    its entry) for its own key, or ``None``."""
    if isinstance(item, Artifact):
        return winner_refusal(item)
    for index in range(len(item.rows)):
        why = winner_refusal(Artifact.model_validate(item.row_artifact_data(index)))
        if why is not None:
            return f"{item.entry_of(index)}: {why}"
    return None


def _span(values: list[object]) -> str:
    ints = sorted(v for v in values if isinstance(v, int))
    strs = sorted({v for v in values if isinstance(v, str)})
    parts = []
    if ints:
        parts.append(f"{ints[0]}–{ints[-1]}" if ints[0] != ints[-1] else str(ints[0]))
    parts.extend(strs)
    return ", ".join(parts)


def describe(name: str, target: str, version: str, contents: Contents) -> str:
    """The package's README: its devices, kernels with their key ranges, provenance (the
    upstream files of imported tables with their revisions) and its notice.  A kept table
    (no rows: an upstream file that holds none) serves no device and no key; its file is
    listed among those imported."""
    artifacts, tables = contents.served(), [t for t in contents.tables if t.rows]
    lines = [
        f"# {name} {version}",
        "",
        f"Tuned [flyconfigs](https://pypi.org/project/flyconfigs/) artifacts for `{target}` (data only).",
        "Installed beside `flyconfigs`, its configs are found through the entry-point group",
        "`flyconfigs.artifacts` with no configuration.",
        "",
        "## Devices",
        "",
    ]
    devices = sorted({a.device.identity.describe() for a in artifacts} | {t.device.identity.describe() for t in tables})
    lines += [f"- {d}" for d in devices]
    lines += ["", "## Kernels and key ranges", ""]
    keys: dict[str, list[dict[str, object]]] = {}
    versions: dict[str, set[str]] = {}
    for a in artifacts:
        keys.setdefault(a.kernel.name, []).append(dict(a.key))
        versions.setdefault(a.kernel.name, set()).add(str(a.kernel.version))
    for t in tables:
        keys.setdefault(t.kernel.name, []).extend(t.key_of(i) for i in range(len(t.rows)))
        versions.setdefault(t.kernel.name, set()).add(str(t.kernel.version))
    for kernel in sorted(keys):
        rows = keys[kernel]
        ranges = "; ".join(f"{axis}: {_span([k.get(axis) for k in rows])}" for axis in rows[0])
        lines.append(f"- `{kernel}` (family version {', '.join(sorted(versions[kernel]))}): {len(rows)} keys — {ranges}")
    provenances = [a.provenance for a in artifacts] + [t.provenance for t in contents.tables]
    created = sorted(p.created for p in provenances if p.created)
    revisions = sorted({p.git_revision for p in provenances if p.git_revision})
    lines += ["", "## Provenance", ""]
    lines.append(f"- tools: {', '.join(sorted({p.tool for p in provenances}))}")
    lines.append(f"- backends: {'; '.join(sorted({_backend_line(p.backend, p.backend_versions) for p in provenances}))}")
    if created:
        lines.append(f"- tuned between {created[0]} and {created[-1]}")
    if revisions:
        lines.append(f"- source revisions: {', '.join(revisions)}")
    rules = {a.selection.rule for a in artifacts} | {t.selection.rule for t in tables}
    lines.append(f"- selection rules: {', '.join(sorted(rules))}")
    upstream = sorted({(s.project, s.file, s.revision or "unrecorded") for p in provenances if (s := p.source)})
    if upstream:
        lines += ["", "## Imported from", ""]
        lines += [f"- {project}: `{file}` at {revision}" for project, file, revision in upstream]
    if contents.notice:
        lines += ["", "## Notice", "", contents.notice.rstrip()]
    return "\n".join(lines) + "\n"


def _backend_line(backend: str, versions: Sequence[tuple[str, str]] | dict[str, str]) -> str:
    pairs = sorted(dict(versions).items())
    return backend + (f" {', '.join(f'{k} {v}' for k, v in pairs)}" if pairs else "")
