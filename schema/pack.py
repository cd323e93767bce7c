"""The pack form (schema 1.7): the artifacts of one kernel on one device in two files.

A tuned artifact is one key's served part (its winner, its default, how the winner was
chosen, where it came from: a few hundred bytes) and every candidate's measurements (a
hundred-odd timings: 96% of the file).  A data package of a thousand keys is smaller,
faster to read and fewer files when the two parts are kept apart and each is shaped like
its data:

- a :class:`Pack` (``"form": "pack"``, ``<kernel>-<arch>-pack-<16 hex>.json``) holds the
  kernel and device once, each key as a row of cells (``columns.key``, as a table's), and
  per row its served part (:class:`PackRow`: winner and default with their timings exact,
  the selection and provenance as indices into lists that hold each distinct one once);
- its :class:`Measurements` (``"form": "measurements"``, the same name with
  ``measurements`` for ``pack``, ``.json.gz``: canonical JSON, gzip-compressed) hold every
  candidate of every row as columns (:class:`MeasuredColumns`): configs and resources listed
  once for the file and named by index, statuses, messages, and the timings as integers
  in units of ``10**exponent`` µs, where the exponent keeps :data:`DIGITS` significant
  digits of the candidate's fastest sample (so every quantile keeps at least that many),
  the bandwidth as the row's bytes per call over the median where every timing of the
  row moved the same bytes.  Each timing is labelled ``screen`` or ``final`` (the
  tuner's ``timed_in``) or ``unknown`` (files tuned before 1.2 that do not say; see
  :func:`labels_of`), and the row says whether the label was recorded or inferred.

The pack is read when a search first needs its kernel on its device; the measurements
only when something needs the candidates (the neighbourhood vote at a miss, ``explain``,
``predict``, the studies): :func:`candidates_of` is the one way to read them.

In-memory API
-------------
``candidates_of(artifact)`` gives every candidate of an artifact, wherever it was read
from, as :class:`Measured` records: ``config``, ``status``, ``timing`` (a
:class:`~flyconfigs.schema.models.Timing` or ``None``), ``label`` (``"screen"``,
``"final"``, ``"unknown"``, or ``None`` for a candidate never timed), ``message``,
``resources`` and ``predicted_us``.  An artifact read from a single 1.x file answers from
its own ``candidates``; one served from a pack row carries only its winner and default
as ``candidates`` (what serving needs) and reads the rest from the pack's measurements on
the first call.  :func:`pack_artifacts` makes packs of artifacts and
:meth:`Pack.artifact` gives a row back as the artifact it was made from (candidates
included, given its measurements): equal to it but for the candidates' timings, kept to
:data:`DIGITS` significant digits (winner and default exactly).
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from flyconfigs.schema.canonical import canonical_bytes, canonical_text, same_value, sha256_hex
from flyconfigs.schema.models import (
    Artifact,
    Candidate,
    CandidateStatus,
    Choice,
    Config,
    Device,
    DeviceIdentity,
    KernelName,
    KernelRef,
    LongText,
    Positive,
    Provenance,
    Resources,
    SchemaVersion,
    Selection,
    Timestamp,
    Timing,
    TimingProtocol,
    _is_none,
    _Model,
)
from flyconfigs.schema.table import MAX_TABLE_ROWS, Row, TableColumns, _find_misfit, _rows_plainly_fit

__all__ = [
    "DIGITS",
    "MEASUREMENTS_FORM",
    "PACK_FORM",
    "Label",
    "Measured",
    "MeasuredColumns",
    "Measurements",
    "Pack",
    "PackRow",
    "candidates_of",
    "folder_artifacts",
    "is_measurements_document",
    "is_pack_document",
    "labels_of",
    "measurements_bytes",
    "pack_artifacts",
    "read_artifacts",
    "parse_measurements_bytes",
]

PACK_FORM = "pack"
MEASUREMENTS_FORM = "measurements"
DIGITS = 5
"""Significant digits a candidate's timing keeps in a pack's measurements (of its
fastest sample, ``min_us``; the other quantiles, larger, keep at least as many)."""
PACK_MINOR = 7
"""The schema minor the pack form begins with."""

Label = Literal["screen", "final", "unknown"]
_Index = Annotated[int, Field(ge=0, le=2**31)]
_Ints = list[int | None]


class MeasurementsRef(_Model):
    """A pack's measurements file: its name beside the pack, the sha256 of its bytes
    (compressed, as written), and how many candidates it holds in all."""

    file: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}\.json\.gz$")]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    candidates: Annotated[int, Field(ge=0, le=2**40)]


class PackRow(_Model):
    """One key's served part: the winner and the default (their timings exact), the
    selection and provenance (indices into the pack's lists; the provenance completed by
    this row's ``created`` and ``timing_protocol``, an index into ``protocols``), the
    schema version its artifact was written in, and how many candidates it tried."""

    schema_version: SchemaVersion
    winner: Choice
    default: Annotated[Choice | None, Field(exclude_if=_is_none)] = None
    selection: _Index
    provenance: _Index
    created: Annotated[Timestamp | None, Field(exclude_if=_is_none)] = None
    protocol: Annotated[_Index | None, Field(exclude_if=_is_none)] = None
    candidates: Positive


class Pack(_Model):
    """The served part of many artifacts of one kernel on one device (schema 1.7)."""

    schema_version: SchemaVersion
    form: Literal["pack"]
    kernel: KernelRef
    device: Device
    columns: TableColumns
    """``key``: the key axes of every row (``config`` and ``measured`` stay empty)."""
    rows: Annotated[list[Row], Field(min_length=1, max_length=MAX_TABLE_ROWS)]
    """Each row's key cells, in the order of ``columns.key``; no two rows with one key."""
    served: Annotated[list[PackRow], Field(max_length=MAX_TABLE_ROWS)]
    selections: Annotated[list[Selection], Field(min_length=1, max_length=4096)]
    provenances: Annotated[list[Provenance], Field(min_length=1, max_length=MAX_TABLE_ROWS)]
    """Each distinct provenance once, without ``created`` and ``timing_protocol`` (the row's)."""
    protocols: Annotated[list[TimingProtocol], Field(max_length=MAX_TABLE_ROWS)] = []
    measurements: MeasurementsRef

    @model_validator(mode="after")
    def _rows_fit(self) -> Pack:
        if int(self.schema_version.split(".")[1]) < PACK_MINOR:
            raise ValueError(f"schema_version: the pack form begins with 1.{PACK_MINOR}, got {self.schema_version!r}")
        if self.columns.config or self.columns.measured:
            raise ValueError("columns: a pack's rows hold key cells only (config and measured stay empty)")
        if not _rows_plainly_fit(self.rows, self.columns.width, len(self.columns.key)):
            _find_misfit(self.rows, self.columns.width, self.columns.key)
        if len(self.served) != len(self.rows):
            raise ValueError(f"served: {len(self.served)} served parts for {len(self.rows)} rows")
        rules = {self.selections[r.selection].rule for r in self.served if r.selection < len(self.selections)}
        for i, row in enumerate(self.served):
            if row.selection >= len(self.selections):
                raise ValueError(f"served[{i}].selection: {row.selection} is past the {len(self.selections)} selections")
            if row.provenance >= len(self.provenances):
                raise ValueError(f"served[{i}].provenance: {row.provenance} is past the {len(self.provenances)} "
                                 "provenances")
            if row.protocol is not None and row.protocol >= len(self.protocols):
                raise ValueError(f"served[{i}].protocol: {row.protocol} is past the {len(self.protocols)} protocols")
        if len(rules) > 1:
            raise ValueError(f"selections: every row of a pack has one selection rule, got {sorted(rules)}")
        for i, p in enumerate(self.provenances):
            if p.created is not None or p.timing_protocol is not None:
                raise ValueError(f"provenances[{i}]: created and timing_protocol are each row's, not here")
        if sum(r.candidates for r in self.served) != self.measurements.candidates:
            raise ValueError(f"measurements.candidates: {self.measurements.candidates}, the rows tried "
                             f"{sum(r.candidates for r in self.served)}")
        return self

    # What a table offers the registry, so a pack is served as a table's rows are.
    @property
    def selection(self) -> Selection:
        """The selection of the first row (every row has its rule)."""
        return self.selections[self.served[0].selection]

    @property
    def created(self) -> str | None:
        """When the newest row was made (``None`` if no row says)."""
        return max((r.created for r in self.served if r.created is not None), default=None)

    def key_of(self, index: int) -> dict[str, Any]:
        """Row ``index``'s key."""
        return dict(zip(self.columns.key, self.rows[index], strict=True))

    def entry_of(self, index: int) -> str:
        """Row ``index``'s place: ``row <index>``."""
        return f"row {index}"

    def provenance_of(self, index: int) -> Provenance:
        """Row ``index``'s provenance, whole."""
        row = self.served[index]
        protocol = self.protocols[row.protocol] if row.protocol is not None else None
        return self.provenances[row.provenance].model_copy(update={"created": row.created,
                                                                   "timing_protocol": protocol})

    def row_artifact_data(self, index: int) -> dict[str, Any]:
        """Row ``index`` as the artifact that serves (validate it with the artifact
        model): its winner and default as its only candidates, with their timings.  Its
        other candidates are the measurements' (:meth:`artifact`, :func:`candidates_of`)."""
        row = self.served[index]
        selection = self.selections[row.selection]
        status = "compiled" if selection.rule == "predicted" else "ok"
        candidates = [{"config": row.winner.config, "status": status,
                       "timing": None if row.winner.timing is None else row.winner.timing.model_dump(mode="json")}]
        if row.default is not None and not same_value(row.default.config, row.winner.config):
            candidates.append({"config": row.default.config, "status": status,
                               "timing": None if row.default.timing is None else
                               row.default.timing.model_dump(mode="json")})
        data = {
            "schema_version": row.schema_version, "kernel": self.kernel.model_dump(mode="json"),
            "device": self.device.model_dump(mode="json"), "key": self.key_of(index), "candidates": candidates,
            "winner": row.winner.model_dump(mode="json"), "selection": selection.model_dump(mode="json"),
            "provenance": self.provenance_of(index).model_dump(mode="json"),
        }
        if row.default is not None:
            data["default"] = row.default.model_dump(mode="json")
        return data

    def artifact(self, index: int, measurements: Measurements) -> Artifact:
        """Row ``index`` as the artifact it was made from, its candidates from
        ``measurements`` (whose timings keep :data:`DIGITS` significant digits)."""
        data = self.row_artifact_data(index)
        data["candidates"] = [c.as_candidate(recorded=measurements.recorded[index]).model_dump(mode="json")
                              for c in measurements.candidates(index)]
        return Artifact.model_validate(data)

    def file_name(self) -> str:
        """``<kernel>-<arch>-pack-<16 hex>.json``: the hash of the kernel, the device and
        the key axes, stable and file-name safe."""
        return f"{self.kernel.name.lstrip('.')}-{self.device.arch}-pack-{self.digest()}.json"

    def digest(self) -> str:
        """The 16 hex digits of this pack's file name."""
        return _digest(self.kernel, self.device, self.columns.key, self.selection.rule)

    def to_json_bytes(self) -> bytes:
        """The canonical JSON of this pack plus a final newline (what is written)."""
        return canonical_bytes(self.model_dump(mode="json")) + b"\n"


class MeasuredColumns(_Model):
    """Every candidate of a pack's rows, one after another in the pack's row order, as
    columns of equal length (one cell per candidate, each row's in the order the tuner
    tried them).  ``config`` and ``resources`` index the file's lists; a timing is
    ``exponent`` and ``median`` (the median is ``median * 10**exponent`` µs) and
    ``min``, ``p20``, ``p80`` as distances from the median in the same unit (``median -
    min``, ``median - p20``, ``p80 - median``); ``bandwidth_gbps`` is ``bytes / (median
    µs * 1000)`` where the row's ``bytes_per_call`` is set, else this column's.  A
    candidate never timed is ``null`` in every timing column; ``label`` is ``screen``,
    ``final`` or ``unknown`` for a timed one."""

    config: list[_Index]
    status: list[CandidateStatus]
    message: Annotated[list[LongText | None] | None, Field(exclude_if=_is_none)] = None
    resources: Annotated[list[_Index | None] | None, Field(exclude_if=_is_none)] = None
    label: list[Label | None]
    exponent: _Ints
    median: _Ints
    min: _Ints
    p20: _Ints
    p80: _Ints
    samples: _Ints
    bandwidth_gbps: Annotated[list[float | None] | None, Field(exclude_if=_is_none)] = None
    predicted_us: Annotated[list[float | None] | None, Field(exclude_if=_is_none)] = None

    @model_validator(mode="after")
    def _columns_fit(self) -> MeasuredColumns:
        n = len(self.config)
        for name in _COLUMNS[1:]:
            column = getattr(self, name)
            if column is not None and len(column) != n:
                raise ValueError(f"{name}: {len(column)} cells for {n} candidates")
        return self


_COLUMNS = ("config", "status", "message", "resources", "label", "exponent", "median", "min", "p20", "p80",
            "samples", "bandwidth_gbps", "predicted_us")


class Measurements(_Model):
    """Every candidate of a pack's rows (schema 1.7): per row (in the pack's order) how
    many candidates it tried (``counts``), whether its labels were recorded by the tuner
    (``recorded``, else inferred: :func:`labels_of`) and the bytes a call of it moves
    (``bytes_per_call``, ``null`` where its bandwidths are a column of their own); then every
    candidate's cells in ``columns``."""

    schema_version: SchemaVersion
    form: Literal["measurements"]
    kernel: KernelName
    device: DeviceIdentity
    digits: Positive
    configs: Annotated[list[Config], Field(max_length=2**20)]
    resources: Annotated[list[Resources], Field(max_length=2**20)] = []
    counts: Annotated[list[Positive], Field(max_length=MAX_TABLE_ROWS)]
    recorded: Annotated[list[bool], Field(max_length=MAX_TABLE_ROWS)]
    bytes_per_call: Annotated[list[Annotated[int, Field(ge=0, le=2**53)] | None], Field(max_length=MAX_TABLE_ROWS)]
    columns: MeasuredColumns
    _starts: list[int] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _indices_fit(self) -> Measurements:
        if not len(self.counts) == len(self.recorded) == len(self.bytes_per_call):
            raise ValueError(f"counts, recorded, bytes_per_call: {len(self.counts)}, {len(self.recorded)} and "
                             f"{len(self.bytes_per_call)} rows")
        if sum(self.counts) != len(self.columns.config):
            raise ValueError(f"counts: {sum(self.counts)} candidates, the columns hold {len(self.columns.config)}")
        c = self.columns
        if c.config and max(c.config) >= len(self.configs):
            raise ValueError(f"columns.config: an index past the {len(self.configs)} configs")
        if c.resources and max((r for r in c.resources if r is not None), default=-1) >= len(self.resources):
            raise ValueError(f"columns.resources: an index past the {len(self.resources)} resources")
        return self

    def candidates(self, index: int) -> list[Measured]:
        """Every candidate of row ``index``."""
        if self._starts is None:
            starts, at = [], 0
            for n in self.counts:
                starts.append(at)
                at += n
            self._starts = starts
        c, first = self.columns, self._starts[index]
        out = []
        for j in range(first, first + self.counts[index]):
            timing = None
            exponent = c.exponent[j]
            if exponent is not None:
                median = c.median[j]
                assert median is not None
                med = _number(median, exponent)
                row_bytes = self.bytes_per_call[index]
                bandwidth = (c.bandwidth_gbps[j] if c.bandwidth_gbps is not None else
                             None if row_bytes is None else row_bytes / (med * 1000.0))
                timing = Timing(median_us=med, min_us=_number(median - (c.min[j] or 0), exponent),
                                p20_us=_number(median - (c.p20[j] or 0), exponent),
                                p80_us=_number(median + (c.p80[j] or 0), exponent),
                                samples=c.samples[j] or 1, bandwidth_gbps=bandwidth)
            resource = c.resources[j] if c.resources is not None else None
            out.append(Measured(
                config=self.configs[c.config[j]], status=c.status[j], timing=timing, label=c.label[j],
                message=c.message[j] if c.message is not None else None,
                resources=self.resources[resource] if resource is not None else None,
                predicted_us=c.predicted_us[j] if c.predicted_us is not None else None))
        return out

    def to_json_bytes(self) -> bytes:
        """The canonical JSON of these measurements plus a final newline."""
        return canonical_bytes(self.model_dump(mode="json")) + b"\n"


@dataclass(frozen=True)
class Measured:
    """One candidate as the in-memory API gives it, from a 1.x artifact or a pack:
    ``label`` says which protocol timed it (``screen``, ``final``, ``unknown`` where the
    file does not say and it cannot be inferred for certain; ``None``: never timed)."""

    config: dict[str, Any]
    status: str
    timing: Timing | None
    label: Label | None
    message: str | None = None
    resources: Resources | None = None
    predicted_us: float | None = None

    def as_candidate(self, recorded: bool = True) -> Candidate:
        """This candidate as the artifact model holds it (``timed_in`` only where the label
        was ``recorded`` by the tuner, never an inferred one)."""
        timed_in = self.label if recorded and self.label in ("screen", "final") else None
        return Candidate(config=self.config, status=self.status, message=self.message,  # type: ignore[arg-type]
                         timing=self.timing, resources=self.resources, predicted_us=self.predicted_us,
                         timed_in=timed_in)


def labels_of(artifact: Artifact) -> tuple[list[Label | None], bool]:
    """Each candidate's label and whether the file recorded them.  Where the tuner
    recorded ``timed_in`` (1.2 and later) that is the label.  Where no candidate says,
    a label is inferred only where it is certain: the tuner's timings then came from two
    protocols, a brief screen and the final that the artifact's ``timing_protocol``
    records, so when the timed candidates have exactly two sample counts, one of them the
    protocol's, those of the protocol's count are ``final`` and those of the fewer
    ``screen``; any other case is ``unknown``."""
    timed = [c.timing for c in artifact.candidates]
    if any(c.timed_in is not None for c in artifact.candidates):
        return [c.timed_in if c.timing is not None else None for c in artifact.candidates], True
    protocol = artifact.provenance.timing_protocol
    counts = {t.samples for t in timed if t is not None}
    final = protocol.samples if protocol is not None else None
    certain = final is not None and len(counts) == 2 and final in counts and min(counts) < final
    labels: list[Label | None] = []
    for t in timed:
        labels.append(None if t is None else
                      ("final" if t.samples == final else "screen") if certain else "unknown")
    return labels, False


def candidates_of(artifact: Artifact) -> list[Measured]:
    """Every candidate ``artifact`` tried (see the module's docstring): its own, or, for
    one served from a pack, those of the pack's measurements, read on the first call.
    Raises what reading them raises (:class:`~flyconfigs.errors.ArtifactError` for a
    missing, altered or invalid measurements file)."""
    loader = artifact._measured  # noqa: SLF001 - set by the pack reader only
    if loader is not None:
        found: list[Measured] = loader()
        return found
    labels, _ = labels_of(artifact)
    return [Measured(config=dict(c.config), status=c.status, timing=c.timing, label=label, message=c.message,
                     resources=c.resources, predicted_us=c.predicted_us)
            for c, label in zip(artifact.candidates, labels, strict=True)]


def with_measurements(artifact: Artifact, loader: Callable[[], list[Measured]]) -> Artifact:
    """``artifact`` (served from a pack row) told where its candidates are."""
    artifact._measured = loader  # noqa: SLF001
    return artifact


# -- making packs -------------------------------------------------------------------


def _digest(kernel: KernelRef, device: Device, axes: Sequence[str], rule: str) -> str:
    identity = {"kernel": kernel.model_dump(mode="json"), "device": device.model_dump(mode="json"),
                "axes": list(axes), "rule": rule}
    return sha256_hex(canonical_bytes(identity))[:16]


def packable(artifact: Artifact) -> bool:
    """Whether ``artifact`` can be a pack row: its key axes hold scalars only, and its
    candidates say where they were timed either all or not at all."""
    if not all(v is None or isinstance(v, (bool, int, float, str)) for v in artifact.key.values()):
        return False
    said = {c.timed_in is not None for c in artifact.candidates if c.timing is not None}
    return len(said) <= 1


def _encode_timing(t: Timing) -> tuple[int, int, int, int, int]:
    """``(exponent, median, median - min, median - p20, p80 - median)`` in units of
    ``10**exponent`` µs keeping :data:`DIGITS` significant digits of ``min_us``, chosen
    so that encoding a decoded timing gives it again."""
    base = t.min_us
    exponent = math.floor(math.log10(base)) - (DIGITS - 1)
    if _scaled(base, exponent) >= 10 ** DIGITS:
        exponent += 1
    median = _scaled(t.median_us, exponent)
    return (exponent, median, median - _scaled(t.min_us, exponent), median - _scaled(t.p20_us, exponent),
            _scaled(t.p80_us, exponent) - median)


def _scaled(value: float, exponent: int) -> int:
    return int(round(value * 10 ** -exponent)) if exponent < 0 else int(round(value / 10 ** exponent))


def _number(units: int, exponent: int) -> float:
    """``units * 10**exponent`` as the double nearest the decimal."""
    return units / 10 ** -exponent if exponent < 0 else float(units * 10 ** exponent)


class _Builder:
    def __init__(self) -> None:
        self.configs: dict[str, int] = {}
        self.config_list: list[Any] = []
        self.resources: dict[str, int] = {}
        self.resource_list: list[Resources] = []

    def config(self, config: Any) -> int:
        text = canonical_text(config)
        if text not in self.configs:
            self.configs[text] = len(self.config_list)
            self.config_list.append(config)
        return self.configs[text]

    def resource(self, resources: Resources) -> int:
        text = canonical_text(resources.model_dump(mode="json"))
        if text not in self.resources:
            self.resources[text] = len(self.resource_list)
            self.resource_list.append(resources)
        return self.resources[text]

    def row(self, artifact: Artifact) -> tuple[dict[str, list[Any] | None], bool, int | None]:
        labels, recorded = labels_of(artifact)
        cands = artifact.candidates
        timings = [c.timing for c in cands]
        encoded = [_encode_timing(t) if t is not None else None for t in timings]
        per_call = [t.bandwidth_gbps * t.median_us for t in timings if t is not None and t.bandwidth_gbps is not None]
        same_bytes = (per_call and len(per_call) == sum(t is not None for t in timings)
                      and max(per_call) - min(per_call) <= 1e-9 * max(per_call))
        bytes_ = None
        if same_bytes:
            bytes_ = round(per_call[0] * 1000.0)
            # Kept only where the bandwidth it gives back is that of every timing to 1e-4.
            if any(abs(bytes_ / (_number(e[1], e[0]) * 1000.0) - t.bandwidth_gbps) > 1e-4 * t.bandwidth_gbps
                   for t, e in zip(timings, encoded, strict=True) if t is not None and e is not None
                   and t.bandwidth_gbps is not None):
                bytes_ = None
        any_bandwidth = any(t is not None and t.bandwidth_gbps is not None for t in timings)
        return dict(
            config=[self.config(c.config) for c in cands],
            status=[c.status for c in cands],
            message=[c.message for c in cands] if any(c.message is not None for c in cands) else None,
            resources=([None if c.resources is None else self.resource(c.resources) for c in cands]
                       if any(c.resources is not None for c in cands) else None),
            label=labels,
            exponent=[e[0] if e else None for e in encoded], median=[e[1] if e else None for e in encoded],
            min=[e[2] if e else None for e in encoded], p20=[e[3] if e else None for e in encoded],
            p80=[e[4] if e else None for e in encoded],
            samples=[t.samples if t is not None else None for t in timings],
            bandwidth_gbps=([t.bandwidth_gbps if t is not None else None for t in timings]
                            if bytes_ is None and any_bandwidth else None),
            predicted_us=([c.predicted_us for c in cands] if any(c.predicted_us is not None for c in cands)
                          else None),
        ), recorded, bytes_


def pack_artifacts(artifacts: Iterable[Artifact], schema_version: str) -> list[tuple[Pack, Measurements]]:
    """The packs of ``artifacts`` (each :func:`packable`): one per kernel, device, set
    of key axes and selection rule, rows sorted by the canonical text of their keys,
    written as ``schema_version`` (1.7 or later)."""
    groups: dict[str, list[Artifact]] = {}
    for artifact in artifacts:
        axes = sorted(artifact.key)
        groups.setdefault(_digest(artifact.kernel, artifact.device, axes, artifact.selection.rule), []).append(artifact)
    packs = []
    for members in groups.values():
        members.sort(key=lambda a: canonical_text(dict(a.key)))
        first = members[0]
        axes = sorted(first.key)
        builder = _Builder()
        selections: dict[str, int] = {}
        provenances: dict[str, int] = {}
        protocols: dict[str, int] = {}
        sel_list: list[Selection] = []
        prov_list: list[Provenance] = []
        proto_list: list[TimingProtocol] = []
        served = []
        rows: list[list[Any]] = []
        measured = []
        for a in members:
            stext = canonical_text(a.selection.model_dump(mode="json"))
            if stext not in selections:
                selections[stext] = len(sel_list)
                sel_list.append(a.selection)
            bare = a.provenance.model_copy(update={"created": None, "timing_protocol": None})
            ptext = canonical_text(bare.model_dump(mode="json"))
            if ptext not in provenances:
                provenances[ptext] = len(prov_list)
                prov_list.append(bare)
            protocol = None
            if a.provenance.timing_protocol is not None:
                ttext = canonical_text(a.provenance.timing_protocol.model_dump(mode="json"))
                if ttext not in protocols:
                    protocols[ttext] = len(proto_list)
                    proto_list.append(a.provenance.timing_protocol)
                protocol = protocols[ttext]
            served.append(PackRow(schema_version=a.schema_version, winner=a.winner, default=a.default,
                                  selection=selections[stext], provenance=provenances[ptext],
                                  created=a.provenance.created, protocol=protocol, candidates=len(a.candidates)))
            rows.append([a.key[n] for n in axes])
            measured.append(builder.row(a))
        measurements = Measurements(schema_version=schema_version, form="measurements", kernel=first.kernel.name,
                                    device=first.device.identity, digits=DIGITS, configs=builder.config_list,
                                    resources=builder.resource_list, counts=[r.candidates for r in served],
                                    recorded=[m[1] for m in measured], bytes_per_call=[m[2] for m in measured],
                                    columns=_concatenated([m[0] for m in measured], [r.candidates for r in served]))
        digest = _digest(first.kernel, first.device, axes, first.selection.rule)
        name = f"{first.kernel.name.lstrip('.')}-{first.device.arch}-measurements-{digest}.json.gz"
        blob = measurements_bytes(measurements)
        pack = Pack(schema_version=schema_version, form="pack", kernel=first.kernel, device=first.device,
                    columns=TableColumns(key=axes, config=[]), rows=rows, served=served, selections=sel_list,
                    provenances=prov_list, protocols=proto_list,
                    measurements=MeasurementsRef(file=name, sha256=sha256_hex(blob),
                                                 candidates=sum(r.candidates for r in served)))
        packs.append((pack, measurements))
    return packs


def _concatenated(rows: list[dict[str, list[Any] | None]], counts: list[int]) -> MeasuredColumns:
    """The rows' columns one after another; a column some rows leave out (all ``null``
    there) is filled with ``null`` for them, and left out where every row does."""
    columns: dict[str, list[Any] | None] = {}
    for name in _COLUMNS:
        if all(row[name] is None for row in rows):
            continue
        out: list[Any] = []
        for row, n in zip(rows, counts, strict=True):
            cells = row[name]
            out.extend(cells if cells is not None else [None] * n)
        columns[name] = out
    return MeasuredColumns.model_validate(columns)


def measurements_bytes(measurements: Measurements) -> bytes:
    """What a measurements file holds: its canonical JSON (and final newline),
    gzip-compressed at level 9 with no name and no time, so equal measurements give
    equal bytes."""
    return gzip.compress(measurements.to_json_bytes(), compresslevel=9, mtime=0)


def parse_measurements_bytes(raw: bytes, file: str, limit: int) -> Any:
    """The JSON document of a measurements file's bytes (decompressed to at most
    ``limit`` bytes), parsed; :class:`~flyconfigs.errors.ArtifactError` naming ``file``
    when it is not gzip or too large."""
    import zlib

    import pydantic_core

    from flyconfigs.errors import ArtifactError, FieldProblem
    from flyconfigs.schema.jsonio import parse_document

    try:
        inflater = zlib.decompressobj(wbits=31)
        data = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise ArtifactError(file, [FieldProblem("", f"not a gzip-compressed measurements file: {exc}")]) from None
    if len(data) > limit or inflater.unconsumed_tail:
        raise ArtifactError(file, [FieldProblem("", f"decompresses to more than {limit} bytes")])
    # Parsed once, without parse_document's second pass (writing the value back to tell a
    # canonical document, half the cost of a 3 MB file): the bytes are the ones the pack's
    # sha256 names, and the measurements model bounds what they may hold.
    try:
        return pydantic_core.from_json(data, allow_inf_nan=False)
    except ValueError:
        return parse_document(data, file, schema_bounds_depth=True)  # says what is wrong, and where


def is_pack_document(data: object) -> bool:
    """Whether a parsed document says it is a pack (``"form": "pack"``)."""
    return isinstance(data, dict) and data.get("form") == PACK_FORM


def is_measurements_document(data: object) -> bool:
    """Whether a parsed document says it is a pack's measurements."""
    return isinstance(data, dict) and data.get("form") == MEASUREMENTS_FORM


TOLERANCE = 10.0 ** -(DIGITS - 1)
"""How far (relative) a candidate's timing read back from a pack may lie from the one
packed: within one unit of the 5th significant digit of its fastest sample."""


def difference(original: Artifact, back: Artifact) -> str | None:
    """Where ``back`` (``original`` packed and read back) differs from it, or ``None``:
    every field equal, but for numbers under ``candidates`` (the timings), equal to
    :data:`TOLERANCE` relative."""
    return _differ(original.model_dump(mode="json"), back.model_dump(mode="json"), "")


def _differ(a: Any, b: Any, path: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{path or '.'}: fields {sorted(set(a) ^ set(b))}"
        for k in sorted(a):
            found = _differ(a[k], b[k], f"{path}.{k}" if path else k)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items, read back {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _differ(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    if (type(a) is float and type(b) is float and path.startswith("candidates[")
            and abs(a - b) <= TOLERANCE * abs(a)):
        return None
    if type(a) is not type(b) or a != b:
        return f"{path}: {a!r}, read back {b!r}"
    return None


def slot_of(artifact: Artifact) -> str:
    """The canonical text of ``artifact``'s identity (kernel, device identity, key)."""
    return canonical_text(artifact.identity())


def is_pack_file(path: Path) -> bool:
    """Whether ``path`` is named as a pack is (``…-pack-<16 hex>.json``)."""
    return "-pack-" in path.name and path.suffix == ".json"


def read_artifacts(folder: Path, kernel: str | None = None) -> tuple[dict[str, tuple[Artifact, Path]], list[Path]]:
    """Every artifact of ``folder`` (recursively) by :func:`slot_of`, with the file it
    comes from: single 1.x files and each pack's rows read back whole (candidates from
    its measurements, whose sha256 is checked), a single file taking the place of a
    packed row of the same slot; and the pack and measurements files found (of ``kernel``
    only, when given: other kernels' packs are not read back).  Tables are left out.
    :class:`~flyconfigs.errors.ArtifactError` naming a file that is invalid."""
    from flyconfigs.errors import ArtifactError, FieldProblem
    from flyconfigs.schema.jsonio import MAX_DOCUMENT_BYTES, json_files_under, read_document, read_file_bytes
    from flyconfigs.schema.load import parse_artifact, parse_measurements, parse_pack
    from flyconfigs.schema.table import is_table_document

    packed: dict[str, tuple[Artifact, Path]] = {}
    single: dict[str, tuple[Artifact, Path]] = {}
    found: list[Path] = []
    for path in json_files_under(folder):
        data = read_document(path, schema_bounds_depth=True)
        if is_table_document(data):
            continue
        if is_pack_document(data):
            pack, _ = parse_pack(data, str(path))
            if kernel is not None and pack.kernel.name != kernel:
                continue
            where = path.parent / pack.measurements.file
            raw = read_file_bytes(where, MAX_DOCUMENT_BYTES)
            if sha256_hex(raw) != pack.measurements.sha256:
                raise ArtifactError(str(where), [FieldProblem("", "its sha256 is not the one its pack names")])
            measurements, _ = parse_measurements(parse_measurements_bytes(raw, str(where), MAX_DOCUMENT_BYTES),
                                                 str(where))
            if list(measurements.counts) != [r.candidates for r in pack.served]:
                raise ArtifactError(str(where), [FieldProblem("counts", "not the measurements of its pack's rows")])
            for i in range(len(pack.rows)):
                artifact = pack.artifact(i, measurements)
                packed[slot_of(artifact)] = (artifact, path)
            found += [path, where]
            continue
        artifact, _ = parse_artifact(data, str(path))
        if kernel is None or artifact.kernel.name == kernel:
            single[slot_of(artifact)] = (artifact, path)
    return {**packed, **single}, found


def folder_artifacts(folder: Path, kernel: str | None = None) -> list[Artifact]:
    """Every artifact of ``folder`` (:func:`read_artifacts`), of ``kernel`` only when
    given, whole (candidates included), sorted by file name: what a study reads
    whether the folder holds single files or packs."""
    found, _ = read_artifacts(folder, kernel)
    chosen = [a for a, _ in found.values()]
    return sorted(chosen, key=lambda a: a.file_name())


def packed_row(folder: Path, kernel: str, identity: DeviceIdentity, key: dict[str, Any]) -> Artifact | None:
    """The served part of ``kernel``'s row for ``key`` on the device ``identity`` in one
    of ``folder``'s packs (its winner, default, kernel and provenance; not its other
    candidates), or ``None``: what ``--resume`` asks of a folder packed since its keys
    were tuned.  A pack that is not valid holds no row."""
    from flyconfigs.errors import ArtifactError
    from flyconfigs.schema.jsonio import read_document
    from flyconfigs.schema.load import parse_pack

    text = canonical_text(dict(key))
    for path in sorted(folder.glob(f"{kernel.lstrip('.')}-*-pack-*.json")):
        try:
            pack, _ = parse_pack(read_document(path, schema_bounds_depth=True), str(path))
        except ArtifactError:
            continue
        if pack.kernel.name != kernel or pack.device.identity != identity:
            continue
        for i in range(len(pack.rows)):
            if canonical_text(pack.key_of(i)) == text:
                return Artifact.model_validate(pack.row_artifact_data(i))
    return None
