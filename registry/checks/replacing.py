"""Whether a tool may replace the artifact file already at a path: nothing the user made
is lost or relabelled.

Each tool replaces only what it made itself: ``tune`` (a measurement) replaces any
artifact, ``predict`` only a prediction, an import only an earlier import.  A file written
by a newer schema (a newer major, or a newer minor: it may hold values this flyconfigs
does not know) is never replaced by anyone, since this flyconfigs cannot tell what it
holds.  A file that is not an artifact at all (not JSON, no ``schema_version``) may be
replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

from flyconfigs.errors import ArtifactError
from flyconfigs.schema.jsonio import read_file_bytes
from flyconfigs.schema.load import parse_artifact
from flyconfigs.schema.versions import CURRENT_MAJOR, CURRENT_MINOR, parse_version

__all__ = ["replacement_refusal"]

_REPLACES: dict[str, frozenset[str]] = {
    "predicted": frozenset({"predicted"}),
    "imported": frozenset({"imported"}),
}
"""What a tool writing an artifact of each selection rule may replace; a measurement
(any other rule) replaces any artifact."""


def replacement_refusal(path: Path, rule: str) -> str | None:
    """Why an artifact whose selection rule is ``rule`` may not replace the file at
    ``path``, or ``None`` (no file, or one it may replace)."""
    try:
        raw = read_file_bytes(path)
    except FileNotFoundError:
        return None
    except ArtifactError:
        return None  # not a regular file, or too large: write_atomic replaces the name only
    try:
        data = json.loads(raw)
        version = parse_version(data["schema_version"])
    except (ValueError, KeyError, TypeError, ArtifactError):
        return None  # not an artifact: nothing of the user's is lost
    if version > (CURRENT_MAJOR, CURRENT_MINOR):
        return (f"holds an artifact of schema {version[0]}.{version[1]}, newer than this flyconfigs reads "
                f"({CURRENT_MAJOR}.{CURRENT_MINOR}); not replaced")
    try:
        existing, _ = parse_artifact(data, str(path))
    except ArtifactError:
        return None  # a broken artifact of a schema this flyconfigs reads: replaced
    allowed = _REPLACES.get(rule)
    if allowed is None or existing.selection.rule in allowed:
        return None
    label = {"predicted": "predicted", "imported": "imported"}.get(existing.selection.rule, "measured")
    return (f"holds a {label} artifact for the same kernel, device and key; a {rule} one never replaces it "
            "(not overwritten)")
