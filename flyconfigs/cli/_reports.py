"""The one renderer of an :class:`~flyconfigs.adapters.importing.ImportReport`, for every
import command (``import vllm|aiter|flydsl``, ``flydsl import``, ``t4 import``): what was
written on stdout, what was refused on stderr, or one JSON object."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from flyconfigs.cli._common import Usage, emit_json

if TYPE_CHECKING:
    from flyconfigs.adapters.importing import ImportReport

__all__ = ["existing_paths", "render_import"]

_COMMAND = {"vllm": "import vllm", "aiter": "import aiter", "flydsl": "flydsl import", "t4": "t4 import"}
_NONE_FOUND = {"vllm": "vLLM config file (*.json)", "aiter": "aiter tuned CSV of a declared family",
               "flydsl": "*.json file"}
"""What a folder named held none of, said as an error (exit 1); a T4 import says nothing."""


def existing_paths(paths: Sequence[str]) -> list[str]:
    """``paths``; :class:`Usage` for one that does not exist."""
    for raw in paths:
        if not os.path.lexists(raw):
            raise Usage(f"{raw}: no such file or directory")
    return list(paths)


def _written(report: ImportReport) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for w in report.written:
        if report.format == "vllm":
            entry = w.entry if w.rows is None else f"table of {w.rows} row{'' if w.rows == 1 else 's'}"
            rows.append({"from": str(w.source), "entry": entry, "to": str(w.path)})
        elif report.format == "aiter":
            rows.append({"from": str(w.source), "kernel": w.kernel, "device": w.device, "rows": w.rows, "to": str(w.path)})
        else:
            rows.append({"from": str(w.source), "to": str(w.path)})
    return rows


def _failed(report: ImportReport) -> list[dict[str, str]]:
    """FlyDSL's refusals, one per file, each said as the file's error."""
    from flyconfigs.errors import ArtifactError, FieldProblem

    by_file: dict[str, list[FieldProblem]] = {}
    for r in report.refused:
        by_file.setdefault(str(r.file), []).append(FieldProblem(r.field, r.message))
    return [{"from": file, "error": str(ArtifactError(file, problems))} for file, problems in by_file.items()]


def render_import(report: ImportReport, paths: Sequence[str], json_output: bool) -> int:
    """Print ``report`` (JSON on stdout with ``json_output``, else a line per file written
    on stdout and the refusals on stderr); the exit status: 0 when it is ok, else 1."""
    for up in report.upstream:
        print(f"{up.path}: revision {up.revision or 'unknown'}, read from {up.how}", file=sys.stderr)
    if not report.files and report.format in _NONE_FOUND:
        # Folders named that hold nothing to import are a problem found (exit 1), said as one.
        print(f"flyconfigs: error: no {_NONE_FOUND[report.format]} in {', '.join(paths)}", file=sys.stderr)
    written = _written(report)
    refused = [{"file": str(r.file), "field": r.field, "message": r.message} for r in report.refused]
    failed = _failed(report) if report.format == "flydsl" else []
    if json_output:
        done_key = "tables" if report.format == "aiter" else "files"
        emit_json({"command": _COMMAND[report.format], done_key: written,
                   **({"failed": failed} if report.format == "flydsl" else {"refused": refused})})
        return 0 if report.ok else 1
    for row in written:
        if report.format == "aiter":
            print(f"{row['from']} -> {row['to']} ({row['kernel']}, {row['device']}, {row['rows']} rows)")
        else:
            print(f"{row['from']}{' ' + row['entry'] if 'entry' in row else ''} -> {row['to']}")
    for fail in failed:
        print(f"flyconfigs: error: {fail['error']}", file=sys.stderr)
    if report.format != "flydsl":
        for bad in refused:
            print(f"flyconfigs: refused: {bad['file']}: {bad['field'] or '<document>'}: {bad['message']}", file=sys.stderr)
    if report.format == "vllm":
        print(f"{len(written)} imported, {len(refused)} refused", file=sys.stderr)
    elif report.format == "aiter":
        print(f"{len(written)} tables, {report.rows} rows imported, {len(refused)} refused", file=sys.stderr)
    return 0 if report.ok else 1
