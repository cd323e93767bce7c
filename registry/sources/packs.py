"""Packs in the catalog (schema 1.7, :mod:`flyconfigs.schema.pack`): a :class:`PackRef`
is served as a table's rows are (:mod:`flyconfigs.registry.sources.tables`), its measurements file
read only when a row's candidates are asked for; and :func:`override_table`, the table or
pack an override directory's file holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from flyconfigs.errors import ArtifactError, FieldProblem, UnsupportedSchemaVersionError
from flyconfigs.registry.core.problems import Problem, ProblemLog
from flyconfigs.registry.sources.entries import Source, _Bad, checked_bytes, checked_document
from flyconfigs.registry.sources.tables import TableRef
from flyconfigs.schema.jsonio import MAX_DOCUMENT_BYTES
from flyconfigs.schema.load import parse_measurements, parse_pack, parse_table
from flyconfigs.schema.models import Artifact
from flyconfigs.schema.pack import (
    Measured,
    Measurements,
    Pack,
    is_pack_document,
    parse_measurements_bytes,
    with_measurements,
)

__all__ = ["PackRef", "override_table"]


@dataclass(eq=False)
class PackRef(TableRef):
    """A pack a source offers (schema 1.7, :mod:`flyconfigs.schema.pack`): served as a
    table's rows are, each row's artifact carrying only its winner and default as
    candidates, and told where the others are: the pack's measurements file, read (its
    sha256, named in the pack, checked; validated whole) on the first
    :func:`~flyconfigs.schema.pack.candidates_of` of any of its rows, never to serve."""

    _measurements: Measurements | None = field(default=None, repr=False)
    _measurements_error: str | None = field(default=None, repr=False)

    def row_artifact(self, row: int) -> Artifact:
        """Row ``row`` as the artifact that serves, its candidates read on demand."""
        artifact = super().row_artifact(row)
        return with_measurements(artifact, lambda: self.candidates(row))

    def measurements_path(self) -> Path:
        """The measurements file: beside the pack, as the pack names it."""
        assert isinstance(self.table, Pack)
        return self.path.parent / self.table.measurements.file

    def measurements(self) -> Measurements:
        """The pack's measurements (the pack read), read and checked once; raises
        :class:`~flyconfigs.errors.ArtifactError` naming the file when it is missing,
        altered, invalid or not this pack's."""
        if self._measurements is None:
            assert isinstance(self.table, Pack)
            path = self.measurements_path()
            if self._measurements_error is not None:
                raise ArtifactError(str(path), [FieldProblem("", self._measurements_error)])
            try:
                self._measurements = _read_measurements(self.table, path, self.root)
            except ArtifactError as exc:
                self._measurements_error = "; ".join(p.message for p in exc.problems)
                raise
        return self._measurements

    def candidates(self, row: int) -> list[Measured]:
        """Every candidate of row ``row``."""
        return self.measurements().candidates(row)

    def _read(self) -> Pack:
        pack = checked_document(self.path, self.root, self.sha256, parse_pack)
        if (pack.kernel.name, pack.device.identity) != (self.kernel, self.device):
            raise _Bad("identity-mismatch", "the pack's kernel or device differs from its manifest entry")
        if self.rows is not None and len(pack.rows) != self.rows:
            raise _Bad("identity-mismatch", f"{len(pack.rows)} rows, its manifest entry says {self.rows}")
        return pack


def _read_measurements(pack: Pack, path: Path, root: str | None) -> Measurements:
    """The measurements file of ``pack`` at ``path``, its bytes' sha256 the pack's,
    decompressed, validated, and of the pack's kernel, device and rows."""
    try:
        raw = checked_bytes(path, root, pack.measurements.sha256)
    except _Bad as bad:
        said = bad.message.replace("the manifest's", "the one its pack names")
        raise ArtifactError(str(path), [FieldProblem("", f"{bad.kind}: {said}")]) from None
    found, _ = parse_measurements(parse_measurements_bytes(raw, str(path), MAX_DOCUMENT_BYTES), str(path))
    counts = list(found.counts)
    if (found.kernel, found.device) != (pack.kernel.name, pack.device.identity) or \
            counts != [r.candidates for r in pack.served]:
        raise ArtifactError(str(path), [FieldProblem("rows", "not the measurements of its pack's kernel, device "
                                                             "and rows")])
    return found


def override_table(path: Path, data: object, source: Source, problems: ProblemLog) -> TableRef | None:
    """The table or pack of an override directory's file ``path`` (parsed as ``data``),
    validated now as the directory's artifacts are; ``None`` (reported) when it is not
    valid."""
    try:
        if is_pack_document(data):
            pack, _ = parse_pack(data, str(path))
            return PackRef(pack.kernel.name, pack.device.identity, str(path), source, rows=len(pack.rows), table=pack)
        table, _ = parse_table(data, str(path))
    except UnsupportedSchemaVersionError as exc:
        problems.report(Problem("unsupported-major", str(path), exc.problems[0].message))
        return None
    except ArtifactError as exc:
        problems.report(Problem("invalid-artifact", str(path), "; ".join(str(p) for p in exc.problems)))
        return None
    return TableRef(table.kernel.name, table.device.identity, str(path), source, rows=len(table.rows), table=table)
