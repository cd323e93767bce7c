"""The language-neutral format: JSON Schema documents generated from the models.

One document per kind (artifact, manifest) and schema version, committed under
``schema/json_schema/`` and shipped in the wheel, so the format can be checked without
flyconfigs.  :func:`generate` rebuilds them from the models; a test fails when the
committed files drift.  JSON Schema cannot tell ``64`` from ``64.0`` and cannot express
cross-field rules (the winner is one of the candidates, timing quantiles are ordered);
flyconfigs' reader enforces both.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from pydantic import BaseModel

from flyconfigs.schema.manifest import Manifest
from flyconfigs.schema.models import SCHEMA_VERSION, Artifact
from flyconfigs.schema.pack import Measurements, Pack
from flyconfigs.schema.table import Table

__all__ = ["KINDS", "generate", "json_schema_file_name", "json_schema_versions", "load_json_schema"]

KINDS: dict[str, type[BaseModel]] = {"artifact": Artifact, "manifest": Manifest, "table": Table, "pack": Pack,
                                     "measurements": Measurements}
SINCE = {"artifact": "1.0", "manifest": "1.0", "table": "1.6", "pack": "1.7", "measurements": "1.7"}
"""The first schema version of each kind: its documents ship from that version on."""


def json_schema_file_name(kind: str, version: str = SCHEMA_VERSION) -> str:
    """``artifact-1.0.schema.json`` and the like."""
    return f"{kind}-{version}.schema.json"


def generate(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``kind`` at the current version."""
    schema = _closed(KINDS[kind].model_json_schema(mode="validation"))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:flyconfigs:schema:{kind}:{SCHEMA_VERSION}",
        "$comment": READER_ONLY[kind],
        **schema,
    }


READER_ONLY = {
    "artifact": (
        "Rules the flyconfigs reader adds that JSON Schema cannot express: an integer is never 64.0; "
        "documents are at most 8 MiB, nest at most 32 levels and have no duplicate object keys; "
        "device.features are sorted; timing has min_us <= p20_us <= median_us <= p80_us; winner.config is "
        "the config of a candidate with status ok and default.config that of a candidate; a candidate's timed_in "
        "(1.2) needs a timing, names a protocol recorded in provenance.timing_protocol whose samples its timing "
        "has, and is never screen for the winner's or the default's config; provenance.source (1.4) belongs to an "
        "imported selection only; fields of a "
        "newer 1.x minor are ignored (this document refuses them, since it describes exactly this minor)."
    ),
    "manifest": (
        "Rules the flyconfigs reader adds that JSON Schema cannot express: an integer is never 64.0; "
        "no two rows name one file or one (kernel, device, key); every row's device.arch equals target; "
        "kernels (1.5) is exactly the rows' kernels, sorted; "
        "each file's sha256 and its artifact's kernel, device and key match the row; tables (1.6) name no file twice, "
        "nor one a row names; a table's sha256 and its kernel and device match its entry; a table or pack entry "
        "has at least one row and a kept one (1.8) none; fields of a newer 1.x minor are ignored."
    ),
    "table": (
        "Rules the flyconfigs reader adds that JSON Schema cannot express: an integer is never 64.0; "
        "documents are at most 8 MiB, nest at most 32 levels and have no duplicate object keys; the table form "
        "begins with schema 1.6; columns name no column twice; every row has one cell per column (key, then config, "
        "then measured), no null key cell and a key no other row has; entries, when present, has one entry per "
        "row; device.features are sorted; provenance.source belongs to an imported selection only and "
        "provenance.model to a predicted one; spelling (1.8) needs entries, names in texts only entries of the file "
        "(of order, where given) and in unserved none of the rows; a table has at least one row unless it keeps a "
        "spelling (1.8); fields of a newer 1.x minor are ignored."
    ),
    "pack": (
        "Rules the flyconfigs reader adds that JSON Schema cannot express: an integer is never 64.0; "
        "documents are at most 8 MiB, nest at most 32 levels and have no duplicate object keys; the pack form "
        "begins with schema 1.7; columns.key names the key axes and config and measured stay empty; every row "
        "has one scalar cell per key axis and a key no other row has; served has one entry per row, whose "
        "selection, provenance and protocol index the lists; every row's selection has one rule; provenances "
        "hold no created nor timing_protocol (each row's); measurements.candidates is the rows' candidates "
        "summed, and measurements.sha256 that of the measurements file's bytes; fields of a newer 1.x minor are "
        "ignored."
    ),
    "measurements": (
        "This document describes the JSON that a measurements file (.json.gz) holds once gzip-decompressed. "
        "Rules the flyconfigs reader adds that JSON Schema cannot express: an integer is never 64.0; "
        "at most 8 MiB decompressed; every column of a row has one cell per candidate; config and resources "
        "index the lists; a timing is median * 10**exponent us with min, p20 and p80 as distances from it "
        "(median - min, median - p20, p80 - median), its bandwidth bytes / (median us * 1000) where bytes is "
        "set; rows are in the order of the pack's rows and as many; fields of a newer 1.x minor are ignored."
    ),
}
"""What the reader checks beyond each JSON Schema document (written into it)."""


def _closed(node: Any) -> Any:
    """Every object whose names follow a pattern admits no other name: pydantic states
    the pattern as ``patternProperties`` only, which alone lets any other name through."""
    if isinstance(node, dict):
        out = {k: _closed(v) for k, v in node.items()}
        if "patternProperties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_closed(v) for v in node]
    return node


def render(kind: str) -> str:
    """The committed text of the current version's document for ``kind``."""
    return json.dumps(generate(kind), indent=2, sort_keys=True) + "\n"


def json_schema_versions() -> list[str]:
    """The schema versions whose documents ship with this package, oldest first."""
    names = [p.name for p in resources.files("flyconfigs.schema").joinpath("json_schema").iterdir()]
    found = {n.split("-", 1)[1].removesuffix(".schema.json") for n in names if n.endswith(".schema.json")}
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")))


def load_json_schema(kind: str, version: str = SCHEMA_VERSION) -> dict[str, Any]:
    """The shipped JSON Schema of ``kind`` at ``version``; ``KeyError`` if none ships."""
    path = resources.files("flyconfigs.schema").joinpath("json_schema", json_schema_file_name(kind, version))
    if not path.is_file():
        raise KeyError(f"no {kind} schema for version {version!r}")
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document
