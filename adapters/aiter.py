"""aiter's tuned GEMM CSVs as ``imported`` artifacts of ``aiter_gemm_<family>``.

A file (``aiter/configs/<family>_tuned_gemm.csv``, or a model's
``aiter/configs/model_configs/…<family>_tuned_gemm….csv``) has a header and one row per
shape: ``gfx`` (files before mid-2026 omit it) and ``cu_num``, which aiter matches against
the running GPU, the family's key columns, its config columns, and what aiter measured
(``us``, ``tflops``, ``bw``, ``errRatio``, kept as the source's reported figures).  Each
row becomes one artifact.  The device is derived from ``gfx`` and ``cu_num``: aiter's
files name no product, so the artifact names none either (its product reads
``AMD <gfx>, <cu_num> CUs``) and is served to every GPU of that arch and CU count.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import re
from collections.abc import Iterator
from pathlib import Path

from flyconfigs.adapters.imported import Imported, UpstreamFile, imported_artifact
from flyconfigs.errors import ArtifactError, FieldProblem
from flyconfigs.kernels.aiter_gemm import FAMILIES, AiterGemmSpec
from flyconfigs.registry.products import product_catalog
from flyconfigs.schema.jsonio import read_file_bytes
from flyconfigs.schema.models import Device, wave_size_of_arch

__all__ = ["CONFIG_DIR", "PROJECT", "family_of", "import_aiter_file"]

PROJECT = "ROCm/aiter"
CONFIG_DIR = "aiter/configs"
_INT = re.compile(r"^-?[0-9]{1,18}$")
_GFX = re.compile(r"^gfx[0-9a-f]{3,4}$")


def family_of(file_name: str) -> AiterGemmSpec:
    """The declared family a file's name says (``…<family>_tuned_gemm….csv``, the longest
    family that fits); :class:`ArtifactError` on ``<file name>`` when none does."""
    stem = file_name.removesuffix(".csv")
    fits = [spec for family, spec in FAMILIES.items() if re.search(rf"(^|_){re.escape(family)}_tuned_gemm($|_)", stem)]
    if not fits:
        raise ArtifactError(file_name, [FieldProblem("<file name>", "names no declared aiter GEMM family (declared: "
                                                     f"{', '.join(f'{f}_tuned_gemm.csv' for f in FAMILIES)})")])
    return max(fits, key=lambda spec: len(spec.family))


def _arch_of_cus(cus: int) -> str | None:
    """The one AMD arch of the catalog's products with ``cus`` compute units, if one."""
    arches = {p.device.arch for p in product_catalog().products if p.device.vendor == "amd" and p.device.compute_units == cus}
    return arches.pop() if len(arches) == 1 else None


def _typed(text: str, kind: type, where: str, file: str) -> object:
    if kind is int:
        if not _INT.match(text):
            raise ArtifactError(file, [FieldProblem(where, f"expected an int, got {text!r}")])
        return int(text)
    if kind is float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ArtifactError(file, [FieldProblem(where, f"expected a finite number, got {text!r}")])
        return value
    if not text:
        raise ArtifactError(file, [FieldProblem(where, "is empty")])
    return text


def _numbered(rows: Iterator[list[str]], file: str, refused: list[ArtifactError]) -> Iterator[tuple[int, list[str]]]:
    """The rows after the header, each with its line number.  A row the csv module cannot
    read (a cell over its size limit) is refused and ends the file: where the next row
    starts is unknown."""
    for number in itertools.count(2):
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as exc:
            refused.append(ArtifactError(file, [FieldProblem(f"line {number}", f"not readable as CSV ({exc}); the "
                                                                             "lines after it are not read")]))
            return
        yield number, row


def import_aiter_file(path: str | Path, revision: str | None = None, family: AiterGemmSpec | None = None,
                      upstream_dir: str = CONFIG_DIR) -> Imported:
    """Every row of the aiter tuned CSV at ``path`` as an artifact.

    ``family`` defaults to the one the file name says (:func:`family_of`); ``revision`` is
    the aiter commit the file was taken from and ``upstream_dir`` its folder there, both
    recorded with its address.  Raises :class:`ArtifactError` naming the file and field
    for a file that cannot be imported at all (its name, encoding or header); a row that
    cannot be represented (a missing or mistyped cell, a device that cannot be derived, a
    second row for one device and key) is refused alone, naming its line and column; a row
    the csv module cannot read is refused and ends the file."""
    p = Path(path)
    file = str(p)
    spec = family or family_of(p.name)
    try:
        # A leading byte-order mark (a CSV saved by a spreadsheet) is not part of the first
        # column's name: pandas, with which aiter reads these files, drops it too.
        text = read_file_bytes(p).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ArtifactError(file, [FieldProblem("", f"not UTF-8 text: {exc}")]) from None
    rows = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(rows, None)
    except csv.Error as exc:
        raise ArtifactError(file, [FieldProblem("line 1", f"not readable as CSV ({exc})")]) from None
    if header is None:
        raise ArtifactError(file, [FieldProblem("line 1", "no header")])
    key_columns, config_columns = dict(spec.key_columns), dict(spec.config_columns)
    known = {"gfx", "cu_num", *key_columns, *config_columns, *spec.reported_columns}
    problems = [FieldProblem(f"line 1.{c}", f"not a column of {spec.name} files") for c in header if c not in known]
    problems += [FieldProblem("line 1", f"missing column {c}") for c in ("cu_num", *key_columns, *config_columns)
                 if c not in header]
    if len(set(header)) != len(header):
        problems.append(FieldProblem("line 1", "a column is named twice"))
    if problems:
        raise ArtifactError(file, problems)
    upstream = UpstreamFile(PROJECT, f"{upstream_dir.rstrip('/')}/{p.name}", revision)
    out = Imported(file)
    seen: dict[str, int] = {}
    for number, row in _numbered(rows, file, out.refused):
        if not row:
            continue
        try:
            if len(row) != len(header):
                raise ArtifactError(file, [FieldProblem(f"line {number}", f"{len(row)} cells, the header has {len(header)}")])
            cells = dict(zip(header, row, strict=True))
            at = f"line {number}."
            cus = _typed(cells["cu_num"], int, at + "cu_num", file)
            assert isinstance(cus, int)
            if cus < 1:
                raise ArtifactError(file, [FieldProblem(at + "cu_num", f"must be positive, got {cus}")])
            if "gfx" in cells:
                arch = cells["gfx"]
                if not _GFX.match(arch):
                    raise ArtifactError(file, [FieldProblem(at + "gfx", f"expected an AMD gfx arch, got {arch!r}")])
                device_from = (f"line {number}: gfx={arch} and cu_num={cus}, which aiter matches against the running "
                               f"GPU; the file names no product")
            else:
                found = _arch_of_cus(cus)
                if found is None:
                    raise ArtifactError(file, [FieldProblem(at + "cu_num", f"{cus} CUs: no gfx column, and flyconfigs' "
                                                            "catalog has no one AMD arch with that many CUs")])
                arch = found
                device_from = (f"line {number}: cu_num={cus}; the file has no gfx column, and every AMD product of "
                               f"flyconfigs' catalog with {cus} CUs is {arch}; the file names no product")
            key = {c: _typed(cells[c], kind, at + c, file) for c, kind in key_columns.items()}
            config = {c: _typed(cells[c], kind, at + c, file) for c, kind in config_columns.items()}
            reported = {c: _typed(cells[c], float, at + c, file) for c in spec.reported_columns if c in cells}
            device = Device(vendor="amd", arch=arch, product=f"AMD {arch}, {cus} CUs", compute_units=cus, features=[],
                            wave_size=wave_size_of_arch(arch))  # type: ignore[arg-type]
            artifact = imported_artifact(
                spec, device, key, config, upstream=upstream, entry=f"line {number}", device_from=device_from,
                tool="flyconfigs import aiter", backend="aiter", reported=reported, file=file, field=f"line {number}")
            slot = repr((arch, cus, sorted(artifact.key.items())))
            if slot in seen:
                raise ArtifactError(file, [FieldProblem(f"line {number}", f"the same gfx, cu_num and key as line "
                                                        f"{seen[slot]}: aiter reads one config per shape")])
            seen[slot] = number
            out.artifacts.append(artifact)
        except ArtifactError as exc:
            out.refused.append(exc)
    return out
