"""A JSON Schema of one kernel's artifacts: the artifact schema of this version with the
kernel's name, its key (every declared axis, typed as the declaration types it, and no
other) and, where the declaration lists its ``tunables``, its config (every tunable,
each to one of its values, and no other; a tunable of ``tunable_defaults``, added after
configs were published, may be left out and means its default) filled in.  A third party can check an artifact
of that kernel completely with any JSON Schema validator and without flyconfigs.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from flyconfigs.registry.families.contract import NAME_PATTERN, KernelDecl, KeyAxis
from flyconfigs.schema.json_schema import load_json_schema
from flyconfigs.schema.models import SCHEMA_VERSION

__all__ = ["config_schema", "kernel_artifact_schema", "key_schema"]

_SCALAR = [{"type": "boolean"}, {"type": "integer"}, {"type": "number"}, {"type": "string"}, {"type": "null"}]


def _axis_schema(axis: KeyAxis) -> dict[str, Any]:
    if axis.kind is int:
        out: dict[str, Any] = {"type": "integer"}
        if axis.minimum is not None:
            out["minimum"] = axis.minimum
        if axis.maximum is not None:
            out["maximum"] = axis.maximum
    elif axis.kind is str:
        out = {"type": "string", "pattern": NAME_PATTERN.pattern}
        if axis.choices is not None:
            out["enum"] = list(axis.choices)
    elif axis.kind is bool:
        out = {"type": "boolean"}
    elif axis.kind is float:
        out = {"type": "number"}
    else:
        out = {"type": "array", "items": {"anyOf": _SCALAR}}
    out["description"] = f"{'ordinal ' if axis.ordinal else ''}key axis {axis.name}"
    return {"anyOf": [out, {"type": "null"}]} if axis.nullable else out


def key_schema(decl: KernelDecl) -> dict[str, Any]:
    """The key of ``decl``: exactly its axes, each typed."""
    return {
        "type": "object",
        "properties": {axis.name: _axis_schema(axis) for axis in decl.key_axes},
        "required": [axis.name for axis in decl.key_axes],
        "additionalProperties": False,
    }


def config_schema(decl: KernelDecl) -> dict[str, Any] | None:
    """The config of ``decl`` from its ``tunables`` (name → the values it takes) and
    ``tunable_defaults`` (name → what leaving it out means) — for a family with
    ``tunable_variants``, one object per implementation — or ``None`` when it declares
    no tunables."""
    tunables = decl.tunables
    if not tunables:
        return None
    defaults = decl.tunable_defaults
    properties: dict[str, dict[str, Any]] = {}
    for name, values in tunables.items():
        allowed = list(values) if isinstance(values, Sequence) and not isinstance(values, str) else [values]
        kinds = sorted({_json_type(v) for v in allowed})
        properties[str(name)] = {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": allowed}
        if name in defaults:
            properties[str(name)]["default"] = defaults[name]
    description = (f"a config of {decl.name}: every tunable, each one of its values. Which combinations "
                   f"run for a key and device is the kernel's own check; nothing that fails it is served.")
    variants = decl.tunable_variants
    if variants is None:
        return {
            "type": "object",
            "properties": properties,
            "required": [name for name in properties if name not in defaults],
            "additionalProperties": False,
            "description": description,
        }
    # One object per implementation: its selector value and exactly its tunables.
    forms = []
    for value, held in variants.members.items():
        names = (variants.selector, *held)
        form_properties = {name: properties[name] for name in names}
        form_properties[variants.selector] = {**properties[variants.selector], "enum": [value]}
        forms.append({
            "type": "object",
            "properties": form_properties,
            # Only the implementation the selector's default names may leave it out.
            "required": [name for name in names if name not in defaults
                         or (name == variants.selector and defaults[name] != value)],
            "additionalProperties": False,
            "description": f"the {variants.selector}={value} implementation",
        })
    return {"oneOf": forms, "description": description}


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "null" if value is None else "array"


def kernel_artifact_schema(decl: KernelDecl, version: str = SCHEMA_VERSION) -> dict[str, Any]:
    """The artifact schema of ``version`` narrowed to ``decl``'s artifacts."""
    document = copy.deepcopy(load_json_schema("artifact", version))
    document["$id"] = f"urn:flyconfigs:schema:artifact:{version}:kernel:{decl.name}"
    document["title"] = f"Artifact of {decl.name} (version {decl.version})"
    document["properties"]["key"] = key_schema(decl)
    defs = document["$defs"]
    kernel_ref = defs["KernelRef"]
    kernel_ref["properties"]["name"] = {"const": decl.name}
    kernel_ref["properties"]["version"] = {"const": decl.version}
    config = config_schema(decl)
    if config is not None:
        for model in ("Candidate", "Choice"):
            defs[model]["properties"]["config"] = config
    return document
