"""What flyconfigs holds for vLLM's kernels, written back as vLLM's own config files.

:func:`export_vllm` groups the ``vllm_fused_moe`` and ``vllm_flydsl_moe`` artifacts a
resolver sees (installed packages and ``FLYCONFIGS_PATH``, in their precedence) into one
file per device and key group, named as vLLM 0.34 names the file it reads
(:func:`~flyconfigs.adapters.vllm.vllm_file_name`, the device as
:func:`~flyconfigs.registry.core.products.vllm_device_name` writes it), each mapping the batch
sizes to their configs, with the ``triton_version`` the configs were tuned with where
they all say one.  The batch sizes are in the upstream file's order when they all come
from one table (vLLM breaks a tie between two equally near batch sizes by that order),
else ascending.  Where the table has a spelling (schema 1.8) the file is written as its
upstream file was, byte for byte: its members in the file's order, each in its own text
where that reads back as the member written, the members no row holds in their places,
its indent, head and tail.  A folder of them is what vLLM reads through
``VLLM_TUNED_CONFIG_FOLDER``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flyconfigs.adapters.spelling import JSON_HEAD, JSON_TAIL, json_member_text, json_text_reads_as
from flyconfigs.adapters.vllm import TRITON_VERSION, vllm_file_name
from flyconfigs.kernels import vllm_flydsl_moe, vllm_fused_moe
from flyconfigs.registry.core.products import vllm_device_name
from flyconfigs.registry.sources.tables import TableRowEntry
from flyconfigs.schema.jsonio import write_atomic
from flyconfigs.schema.models import Artifact
from flyconfigs.schema.table import Spelling, Table

__all__ = ["KERNELS", "Exported", "export_vllm", "vllm_files", "write_vllm_files"]

KERNELS = {vllm_fused_moe.SPEC.name: vllm_fused_moe.SPEC.version, vllm_flydsl_moe.SPEC.name: vllm_flydsl_moe.SPEC.version}
"""The families vLLM reads, with the version whose configs it reads."""


@dataclass
class Exported:
    """An export: each file's content by name, the exact text of those whose table kept
    the upstream file's spelling, and what was left out and why."""

    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)


def vllm_files(artifacts: Iterable[tuple[Artifact, str]], rows: Mapping[int, tuple[str, int]] | None = None,
               spellings: Mapping[str, Spelling] | None = None) -> Exported:
    """vLLM's files for ``artifacts`` (each with where it was read from, for messages),
    ``rows`` giving, by ``id`` of an artifact that is a table's row, the table and the
    row's index, and ``spellings`` the spelling of a table by where it was read; taken in
    precedence order: a batch size of a file that an earlier artifact already
    gave is skipped, as is an artifact of another family version or of a device whose
    name cannot be a vLLM file name.  A file whose table rows all come from one table
    with a JSON spelling also gets its text (:func:`spelled_text`)."""
    out = Exported()
    rows = {} if rows is None else rows  # filled as the artifacts are read
    versions: dict[str, set[str | None]] = {}
    places: dict[str, dict[str, tuple[str, int] | None]] = {}
    for artifact, where in artifacts:
        kernel = artifact.kernel.name
        if kernel not in KERNELS:
            continue
        if artifact.kernel.version != KERNELS[kernel]:
            out.skipped.append(f"{where}: {kernel} version {artifact.kernel.version}, not the {KERNELS[kernel]} vLLM reads")
            continue
        device = vllm_device_name(artifact.device.product)
        if "," in device or "/" in device:
            out.skipped.append(f"{where}: the device {artifact.device.product!r} cannot be a vLLM device_name")
            continue
        name = vllm_file_name(kernel, device, dict(artifact.key))
        batch = str(artifact.key["M"])
        entries = out.files.setdefault(name, {})
        if batch in entries:
            out.skipped.append(f"{where}: {name} batch size {batch} is already given by an artifact before it")
            continue
        entries[batch] = dict(artifact.winner.config)
        places.setdefault(name, {})[batch] = rows.get(id(artifact))
        versions.setdefault(name, set()).add(artifact.provenance.backend_versions.get("triton"))
    for name, entries in out.files.items():
        ordered: dict[str, Any] = {}
        triton = versions[name]
        if len(triton) == 1 and None not in triton:
            ordered[TRITON_VERSION] = next(iter(triton))
        found = places[name]
        rows_of = {batch: place[1] for batch, place in found.items() if place is not None}
        tables = {place[0] for place in found.values() if place is not None}
        if len(tables) == 1 and len(rows_of) == len(found):
            ordered.update(sorted(entries.items(), key=lambda item: rows_of[item[0]]))
        else:
            ordered.update(sorted(entries.items(), key=lambda item: int(item[0])))
        spelling = (spellings or {}).get(next(iter(tables))) if len(tables) == 1 else None
        if spelling is not None and spelling.format == "json" and spelling.indent is not None:
            out.texts[name] = spelled_text(ordered, spelling)
            ordered = json.loads(out.texts[name])  # the file's order of members, which the text has
        out.files[name] = ordered
    return out


def spelled_text(content: Mapping[str, Any], spelling: Spelling) -> str:
    """The file of ``content`` (its members and their values) as the upstream file spelled
    it: its head, its members in the file's order (any other after them, as ``content``
    orders them), each in the file's own text where that reads back as the member
    (:func:`~flyconfigs.adapters.spelling.json_text_reads_as`) and as ``json.dumps`` with
    the file's indent writes it otherwise, the members no row holds in their places, its
    tail."""
    assert spelling.indent is not None
    place = {entry: i for i, entry in enumerate(spelling.order or ())}
    members = [(f'"{name}"', name, value) for name, value in content.items()]
    kept = [(u.entry, u.text) for u in spelling.unserved if u.entry in place and u.entry not in
            {entry for entry, _, _ in members}]
    pieces: list[tuple[tuple[int, int], str]] = []
    for rank, (entry, name, value) in enumerate(members):
        own = spelling.texts.get(entry)
        text = own if own is not None and json_text_reads_as(own, name, value) else json_member_text(
            name, value, spelling.indent)
        pieces.append(((place.get(entry, len(place)), rank), text))
    pieces.extend(((place[entry], 0), text) for entry, text in kept)
    body = ",".join(text for _, text in sorted(pieces, key=lambda pair: pair[0]))
    return (spelling.head if spelling.head is not None else JSON_HEAD) + body + (
        spelling.tail if spelling.tail is not None else JSON_TAIL)


def export_vllm(resolver: Any = None) -> Exported:
    """vLLM's files for every artifact ``resolver`` (default: the process's) sees."""
    from flyconfigs.registry import default_resolver

    resolver = resolver or default_resolver()

    rows: dict[int, tuple[str, int]] = {}
    spellings: dict[str, Spelling] = {}

    def found() -> Iterable[tuple[Artifact, str]]:
        for entry in resolver.all_entries():
            if entry.kernel in KERNELS:
                artifact = entry.load(resolver.problems)
                if artifact is not None:
                    if isinstance(entry, TableRowEntry) and entry.ref is not None:
                        rows[id(artifact)] = (entry.ref.location, entry.row)
                        table = entry.ref.table
                        if isinstance(table, Table) and table.spelling is not None:
                            spellings.setdefault(entry.ref.location, table.spelling)
                    yield artifact, str(entry.path)

    return vllm_files(found(), rows, spellings)


def write_vllm_files(exported: Exported, folder: str | Path) -> list[Path]:
    """Write each file of ``exported`` into ``folder`` (created; each write atomic): its
    upstream file's text where its table kept the spelling, else as vLLM's own files are
    laid out (four-space indent, a final newline); the paths."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    return [write_atomic(out / name, (exported.texts.get(name) or json.dumps(content, indent=4) + "\n").encode())
            for name, content in sorted(exported.files.items())]
