"""aiter's tuned CSVs as ``imported`` tables, one per (file, device).

A file (``aiter/configs/<name>.csv``, a model's ``aiter/configs/model_configs/…csv`` or a
FlyDSL op's ``aiter/ops/flydsl/…_tuned.csv``) has a header and one row per shape: the
device columns aiter matches against the running GPU (``gfx`` or ``arch``, and ``cu_num``
where the family has it), the family's key columns, its config columns and what aiter's
tuner measured (``us``, ``tflops``, ``errRatio``, …, kept as the table's measurements).
The family is the one aiter reads the file for (:func:`~flyconfigs.kernels.aiter_gemm.family_of`).
The device is derived from ``gfx`` and ``cu_num``, or, in files without ``gfx``, from
``cu_num`` through flyconfigs' product catalog (as aiter's ``gfx_from_cu_num`` does): the
file names no product, so the table names none either (its product reads ``AMD <gfx>,
<cu_num> CUs``; a file keyed by the arch alone, ``AMD <gfx>``).  Rows are kept exactly:
key cells typed as aiter's lookup compares them, the other cells as pandas reads them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flyconfigs.adapters.aiter_export import render_cell
from flyconfigs.adapters.imported import UpstreamFile
from flyconfigs.adapters.spelling import csv_line, csv_records, line_ending
from flyconfigs.errors import ArtifactError, FieldProblem, InvalidKeyError
from flyconfigs.kernels.aiter_family import FALLBACK_AXIS, PUBLISHED_TARGETS, AiterFamily, cell_value
from flyconfigs.kernels.aiter_gemm import family_of
from flyconfigs.registry.core.products import product_catalog
from flyconfigs.registry.families.contract import normalize_key
from flyconfigs.schema.canonical import canonical_text
from flyconfigs.schema.jsonio import read_file_bytes
from flyconfigs.schema.load import parse_table
from flyconfigs.schema.models import SCHEMA_VERSION, Device, wave_size_of_arch
from flyconfigs.schema.table import Table

__all__ = ["CONFIG_DIR", "PROJECT", "ImportedTables", "import_aiter_file"]

PROJECT = "ROCm/aiter"
CONFIG_DIR = "aiter/configs"
_INT = re.compile(r"^-?[0-9]{1,18}$")
_GFX = re.compile(r"^gfx[0-9a-f]{3,4}$")


@dataclass
class ImportedTables:
    """One file's import: its tables (one per device), the rows they hold, and each row
    refused with the file, the line and the field."""

    file: str
    family: AiterFamily
    tables: list[Table] = field(default_factory=list)
    refused: list[ArtifactError] = field(default_factory=list)


def _arch_of_cus(cus: int) -> str | None:
    """The one AMD arch of the catalog's products with ``cus`` compute units, if one."""
    arches = {p.device.arch for p in product_catalog().products if p.device.vendor == "amd" and p.device.compute_units == cus}
    return arches.pop() if len(arches) == 1 else None


def _cus_of_arch(arch: str) -> int | None:
    """The most compute units of the catalog's products of ``arch`` (a file keyed by the
    arch alone serves them all), if the catalog has one."""
    counts = [p.device.compute_units for p in product_catalog().products if p.device.arch == arch]
    return max(counts) if counts else None


def _arch_device(arch: str) -> Device:
    """The device of a file keyed by ``arch`` alone (``AMD <arch>``, the most compute units
    of the catalog's products of it), as :func:`_device` makes it."""
    cus = _cus_of_arch(arch) or 1
    return Device(vendor="amd", arch=arch, product=f"AMD {arch}", compute_units=cus, features=[],
                  wave_size=wave_size_of_arch(arch))  # type: ignore[arg-type]


def _key_cell(text: str, kind: type, where: str, file: str) -> Any:
    if kind is int:
        if not _INT.match(text):
            raise ArtifactError(file, [FieldProblem(where, f"expected an int, got {text!r}")])
        return int(text)
    if kind is bool:
        if text not in ("True", "False"):
            raise ArtifactError(file, [FieldProblem(where, f"expected True or False, got {text!r}")])
        return text == "True"
    if not text:
        raise ArtifactError(file, [FieldProblem(where, "is empty")])
    return text


def _device(cells: dict[str, str], spec: AiterFamily, at: str, file: str) -> tuple[Device, str]:
    """The row's device and how it was derived."""
    cus_text = cells.get("cu_num")
    cus = _key_cell(cus_text, int, at + "cu_num", file) if cus_text is not None else None
    if cus is not None and cus < 1:
        raise ArtifactError(file, [FieldProblem(at + "cu_num", f"must be positive, got {cus}")])
    arch = cells.get(spec.arch_column)
    if arch is not None:
        if not _GFX.match(arch):
            raise ArtifactError(file, [FieldProblem(at + spec.arch_column, f"expected an AMD gfx arch, got {arch!r}")])
        how = f"{spec.arch_column}={arch}" + (f" and cu_num={cus}" if cus is not None else "")
    elif cus is not None:
        arch = _arch_of_cus(cus)
        if arch is None:
            raise ArtifactError(file, [FieldProblem(at + "cu_num", f"{cus} CUs: no gfx column, and flyconfigs' catalog "
                                                    "has no one AMD arch with that many CUs")])
        how = f"cu_num={cus}; no gfx column, and every AMD product of flyconfigs' catalog with {cus} CUs is {arch}"
    else:
        raise ArtifactError(file, [FieldProblem(at.rstrip("."), f"no {spec.arch_column} and no cu_num: no device")])
    if cus is None:
        cus = _cus_of_arch(arch)
        if cus is None:
            raise ArtifactError(file, [FieldProblem(at + spec.arch_column, f"{arch}: the file names only the arch, and "
                                                    "flyconfigs' catalog knows no product of it")])
        product = f"AMD {arch}"
        how += (f", which aiter matches against the running GPU's arch alone: served to every {arch} GPU (the compute "
                f"units are the most of the catalog's {arch} products)")
    else:
        product = f"AMD {arch}, {cus} CUs"
        how += ", which aiter matches against the running GPU"
    try:
        wave = wave_size_of_arch(arch)
    except ValueError as exc:  # gfxabc: a gfx name of no generation the arch rule knows
        raise ArtifactError(file, [FieldProblem(at + (spec.arch_column if spec.arch_column in cells else "cu_num"),
                                                str(exc))]) from None
    device = Device(vendor="amd", arch=arch, product=product, compute_units=cus, features=[],
                    wave_size=wave)  # type: ignore[arg-type]
    return device, how + "; the file names no product"


def import_aiter_file(path: str | Path, revision: str | None = None, family: AiterFamily | None = None,
                      upstream_dir: str = CONFIG_DIR) -> ImportedTables:
    """The rows of the aiter tuned CSV at ``path`` as tables, one per device.

    ``family`` defaults to the one aiter reads the file for; ``revision`` is the aiter
    commit the file was taken from and ``upstream_dir`` its folder there, both recorded.
    Raises :class:`ArtifactError` naming the file and field for a file that cannot be
    imported at all (no family, its encoding or header); a row that cannot be
    represented (a missing or mistyped cell, a device that cannot be derived, a second
    row for one device and key, which aiter's lookup cannot tell apart) is refused
    alone, naming its line and column.  Each table's ``spelling`` keeps what the rows
    cannot say, so that the file's own bytes come back on export: the header line, the
    line ending, each line whose text is not the one written from its row (``7.780``, a
    short row), and the lines that are no row (those refused, with why; blank ones),
    each kept with the table of its device, or with every table of the file when it has
    none.  A file that holds no row (aiter's header-only files) names no device and is
    read by aiter on every GPU: it becomes one table of no rows for each arch flyconfigs
    publishes aiter's tables for (``PUBLISHED_TARGETS``), which serves nothing and gives
    the file back."""
    p = Path(path)
    file = str(p)
    spec = family or family_of(p.name)
    if spec is None:
        raise ArtifactError(file, [FieldProblem("<file name>", "not a tuned file aiter reads for a declared family")])
    try:
        text = read_file_bytes(p).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(file, [FieldProblem("", f"not UTF-8 text: {exc}")]) from None
    # A leading byte-order mark is not part of the first column's name: pandas drops it too.
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    records = csv_records(text[len(bom):])
    first = next(records, None)
    if first is None:
        raise ArtifactError(file, [FieldProblem("line 1", "no header")])
    _, head, header, unreadable = first
    if header is None:
        raise ArtifactError(file, [FieldProblem("line 1", unreadable or "not readable as CSV")])
    wrong = spec.layout_problem(header)
    if wrong is not None or len(set(header)) != len(header):
        raise ArtifactError(file, [FieldProblem("line 1", wrong or "a column is named twice")])
    out = ImportedTables(file, spec)
    config = [c for c in header if c in spec.config]
    if not config:
        raise ArtifactError(file, [FieldProblem("line 1", f"no config column ({', '.join(spec.config)}): a row would "
                                                          "serve an empty config over what is installed")])
    measured = [c for c in header if c in spec.measured_columns]
    newline = line_ending(head) or "\n"
    groups: dict[str, tuple[Device, str, dict[str, tuple[int, list[Any]]]]] = {}
    texts: dict[int, str] = {}
    unserved: list[tuple[int, str | None, str]] = []  # line, the device's group (None: every table), why
    for number, line_text, row, unreadable in records:
        texts[number] = line_text
        if row is None:
            unserved.append((number, None, unreadable or "not readable as CSV"))
            out.refused.append(ArtifactError(file, [FieldProblem(f"line {number}", unreadable or "not readable")]))
            continue
        if not row:
            unserved.append((number, None, "a blank line"))
            continue
        slot_group: str | None = None
        try:
            if len(row) > len(header):
                raise ArtifactError(file, [FieldProblem(f"line {number}", f"{len(row)} cells, the header has {len(header)}: "
                                                        "pandas, with which aiter reads the file, refuses it")])
            # A short row's missing cells are empty, as pandas reads them (NaN).
            cells = dict(zip(header, row + [""] * (len(header) - len(row)), strict=True))
            at = f"line {number}."
            device, how = _device(cells, spec, at, file)
            slot_group = canonical_text(device.identity.model_dump(mode="json"))
            key = {c: _key_cell(cells[c], spec.type_of(c), at + c, file) for c in spec.key}
            if FALLBACK_AXIS in (a.name for a in spec.key_axes):
                key[FALLBACK_AXIS] = cells.get("_tag") == "flydsl_fallback"
            try:
                normalize_key(spec, key)
            except InvalidKeyError as exc:
                raise ArtifactError(file, [FieldProblem(f"line {number}", str(exc))]) from None
            values = [*key.values(), *(cell_value(cells[c]) for c in config), *(cell_value(cells[c]) for c in measured)]
            for name, value in zip([*key, *config, *measured], values, strict=True):
                why = _cell_problem(value)
                if why is not None:  # the table would refuse it, and with it every row of the device
                    raise ArtifactError(file, [FieldProblem(at + name, why)])
            group = groups.setdefault(slot_group, (device, how, {}))
            slot = canonical_text(list(key.values()))
            kept = group[2].get(slot)
            if kept is None:
                group[2][slot] = (number, values)
            elif spec.on_duplicate == "lowest-us" and _us(values, config, measured) < _us(kept[1], config, measured):
                group[2][slot] = (number, values)
                why = (f"the same key as line {number}, which aiter serves instead (the lowest us of the rows that "
                       "match)")
                unserved.append((kept[0], slot_group, why))
                out.refused.append(ArtifactError(file, [FieldProblem(f"line {kept[0]}", why)]))
            else:
                why = ("which aiter serves instead (the lowest us of the rows that match)" if spec.on_duplicate ==
                       "lowest-us" else "aiter's lookup cannot tell them apart")
                raise ArtifactError(file, [FieldProblem(f"line {number}", f"the same device and key as line {kept[0]}, "
                                                        f"{why}")])
        except ArtifactError as exc:
            unserved.append((number, slot_group, "; ".join(f"{p.field}: {p.message}" for p in exc.problems)))
            out.refused.append(exc)
    upstream = UpstreamFile(PROJECT, f"{upstream_dir.rstrip('/')}/{p.name}", revision)
    if not groups:  # a file of no row names no device, and aiter reads it on every GPU
        for arch in PUBLISHED_TARGETS:
            groups[arch] = (_arch_device(arch), f"the file holds no row, so names no device; aiter reads it on "
                            f"every GPU: kept (serving nothing) for {arch}, each of the arches flyconfigs publishes "
                            "aiter's tables for", {})
    for group_key, (device, how, found) in groups.items():
        ordered = sorted(found.values(), key=lambda pair: pair[0])
        spelled: dict[str, str] = {}
        for number, values in ordered:
            cells = dict(zip([a.name for a in spec.key_axes] + config + measured, values, strict=True))
            cells[spec.arch_column] = device.arch
            if texts[number] != csv_line([render_cell(cells.get(c)) for c in header], newline):
                spelled[f"line {number}"] = texts[number]
        spelling = {
            "format": "csv", "newline": newline, "head": bom + head if bom + head != csv_line(header, newline) else None,
            "texts": spelled, "unserved": [{"entry": f"line {n}", "text": texts[n], "why": why}
                                           for n, where, why in sorted(unserved)
                                           if where is None or where == group_key or where not in groups]}
        data = {
            "schema_version": SCHEMA_VERSION, "form": "table",
            "kernel": {"name": spec.name, "version": spec.version, "source_sha256": None},
            "device": device.model_dump(mode="json"),
            "columns": {"key": [a.name for a in spec.key_axes], "config": config, "measured": measured},
            "rows": [values for _, values in ordered], "entries": [f"line {n}" for n, _ in ordered], "layout": header,
            "spelling": {k: v for k, v in spelling.items() if v is not None},
            "selection": {"rule": "imported"},
            "provenance": {"tool": "flyconfigs import aiter", "backend": "aiter", "source": {
                "project": upstream.project, "file": upstream.path, "revision": upstream.revision, "url": upstream.url,
                "device_from": how}},
        }
        try:
            out.tables.append(parse_table(data, file)[0])
        except ArtifactError as exc:
            out.refused.append(exc)
    return out


_MAX_CELL = 1024
"""The longest text a table's cell holds (:mod:`flyconfigs.schema.table`)."""


def _cell_problem(value: Any) -> str | None:
    """Why a table could not hold ``value`` as a cell (a text over 1,024 characters, an
    integer beyond 64 bits, a number that is not finite), or ``None``."""
    if isinstance(value, str) and len(value) > _MAX_CELL:
        return f"a cell of {len(value)} characters, over the {_MAX_CELL} a table's cell holds"
    if type(value) is int and not -(2**63) <= value < 2**63:
        return f"{value} is beyond a 64-bit integer"
    if type(value) is float and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    return None


def _us(values: list[Any], config: list[str], measured: list[str]) -> float:
    """The row's ``us`` as aiter sorts by it (``float(us or 0.0)``: none is 0)."""
    if "us" not in measured:
        return 0.0
    value = values[len(values) - len(measured) + measured.index("us")]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
