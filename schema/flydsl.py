"""FlyDSL's offline autotune artifacts, imported and exported byte-compatibly.

A FlyDSL file is ``{"version": 1, "identity": {"name", "key", "device": {"name", "arch",
"compute_units"}}, "config"}``, named ``<name>-<sha256 of the identity>.json`` where the
identity is serialised with sorted keys, separators ``(",", ":")`` and ASCII escaping,
and written with sorted keys, a 2-space indent and a final newline.  Importing is the
schema's migration step from format ``flydsl-1`` to ``1.0``; exporting writes what
FlyDSL's own writer would.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from flyconfigs.errors import ArtifactError, FieldProblem
from flyconfigs.schema.jsonio import write_atomic
from flyconfigs.schema.models import GFX_ARCH, SCHEMA_VERSION, Artifact, wave_size_of_arch
from flyconfigs.schema.versions import Migration, register_migration

__all__ = [
    "check_file_name",
    "export_flydsl",
    "flydsl_file_name",
    "flydsl_identity_digest",
    "flydsl_payload",
    "import_flydsl_file",
    "write_flydsl",
]

IMPORTED_KERNEL_VERSION = 1


def flydsl_identity_digest(identity: dict[str, Any]) -> str:
    """The hex sha256 FlyDSL computes for an identity."""
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def flydsl_file_name(identity: dict[str, Any]) -> str:
    """``<name>-<digest>.json``, as FlyDSL names it."""
    return f"{identity['name']}-{flydsl_identity_digest(identity)}.json"


def flydsl_payload(artifact: Artifact) -> bytes:
    """The bytes FlyDSL's writer produces for ``artifact``'s winner."""
    identity = {
        "name": artifact.kernel.name,
        "key": dict(artifact.key),
        "device": {
            "name": artifact.device.product,
            "arch": artifact.device.arch,
            "compute_units": artifact.device.compute_units,
        },
    }
    payload = {"version": 1, "identity": identity, "config": dict(artifact.winner.config)}
    return (json.dumps(payload, sort_keys=True, indent=2, allow_nan=False) + "\n").encode("utf-8")


def export_flydsl(artifact: Artifact) -> tuple[str, bytes]:
    """File name and bytes of ``artifact`` as a FlyDSL offline artifact.

    A conversion never upgrades a label.  FlyDSL's format has no place to say how a
    winner was chosen, and a FlyDSL file is read back as ``imported`` (measured by
    another tool), so only a winner that was measured (``beat-default-beyond-noise``, or
    ``imported``, which stays imported) is exported: a ``predicted`` one, or one a test
    double made, is refused.

    Raises :class:`ArtifactError` for a device FlyDSL cannot describe (it serves AMD
    only) and for a winner that was not measured.
    """
    if artifact.device.vendor != "amd":
        raise ArtifactError(
            artifact.file_name(),
            [FieldProblem("device.vendor", f"FlyDSL artifacts describe AMD devices, not {artifact.device.vendor!r}")],
        )
    if artifact.selection.rule == "predicted":
        raise ArtifactError(artifact.file_name(), [FieldProblem(
            "selection.rule", "a predicted winner was never measured, and FlyDSL's format cannot say so: read back "
            "it would be 'imported' (measured by another tool) and outrank predictions; not exported")])
    if artifact.from_test_double:
        raise ArtifactError(artifact.file_name(), [FieldProblem(
            "provenance.backend", f"made by a test double ({artifact.provenance.backend}), which FlyDSL's format "
            "cannot say: read back it would pass for a real measurement; not exported")])
    payload = flydsl_payload(artifact)
    return flydsl_file_name(json.loads(payload)["identity"]), payload


def write_flydsl(artifact: Artifact, folder: str | Path) -> Path:
    """Write ``artifact`` into ``folder`` as FlyDSL would (atomically); return the path.

    FlyDSL's identity omits parts of flyconfigs' (``device.features``, the kernel
    version), so two artifacts can share one FlyDSL name: a file of that name holding
    different bytes is never overwritten (:class:`ArtifactError`); the same bytes are."""
    name, payload = export_flydsl(artifact)
    target = Path(folder) / name
    try:
        existing = target.read_bytes() if target.is_file() else None
    except OSError:
        existing = None
    if existing is not None and existing != payload:
        raise ArtifactError(str(target), [FieldProblem(
            "identity", "holds a different artifact with the same FlyDSL identity (FlyDSL's identity omits "
            "device.features and the kernel version); not overwritten")])
    return write_atomic(target, payload)


def _require(data: dict[str, Any], field: str, kind: type, file: str, path: str) -> Any:
    value = data.get(field)
    if type(value) is not kind:
        raise ArtifactError(file, [FieldProblem(f"{path}{field}", f"expected {kind.__name__}, got {value!r}")])
    return value


def check_file_name(identity: Any, file: str) -> None:
    """Where a FlyDSL file is named ``<name>-<64 hex>.json``, as FlyDSL names them, the
    digest must be the identity's and the name its kernel's: FlyDSL would never find the
    file otherwise, so neither may flyconfigs serve it.  Applied wherever a FlyDSL file
    is read (import, ``validate``, the loader's override folders)."""
    base = file.replace("\\", "/").rsplit("/", 1)[-1]
    stem = base.removesuffix(".json")
    name, _, digest = stem.rpartition("-")
    if not (base.endswith(".json") and name and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
        return
    if not isinstance(identity, dict):
        return
    expected = flydsl_identity_digest(identity)
    if digest != expected:
        raise ArtifactError(file, [FieldProblem("identity", f"does not match the file name's digest (it hashes to {expected})")])
    if identity.get("name") != name:
        raise ArtifactError(file, [FieldProblem("identity.name", f"is {identity.get('name')!r}; the file name says {name!r}")])


def _from_flydsl(data: dict[str, Any], file: str) -> dict[str, Any]:
    check_file_name(data.get("identity"), file)
    unknown = sorted(set(data) - {"version", "identity", "config"})
    if unknown:
        raise ArtifactError(file, [FieldProblem(unknown[0], "unknown field in a FlyDSL artifact")])
    identity = _require(data, "identity", dict, file, "")
    device = _require(identity, "device", dict, file, "identity.")
    name = _require(identity, "name", str, file, "identity.")
    key = _require(identity, "key", dict, file, "identity.")
    config = _require(data, "config", dict, file, "")
    arch = _require(device, "arch", str, file, "identity.device.")
    product = _require(device, "name", str, file, "identity.device.")
    cus = _require(device, "compute_units", int, file, "identity.device.")
    if not GFX_ARCH.match(arch):
        raise ArtifactError(file, [FieldProblem("identity.device.arch", f"expected an AMD gfx arch (gfx, a decimal "
                                                                        f"major, two hex digits), got {arch!r}")])
    return {
        "schema_version": SCHEMA_VERSION,
        "kernel": {"name": name, "version": IMPORTED_KERNEL_VERSION, "source_sha256": None},
        "device": {
            "vendor": "amd",
            "arch": arch,
            "product": product,
            "compute_units": cus,
            "features": [],
            "wave_size": wave_size_of_arch(arch),
        },
        "key": key,
        "candidates": [{"config": config, "status": "ok"}],
        "winner": {"config": config},
        "selection": {"rule": "imported"},
        "provenance": {"tool": "FlyDSL autotune (imported)", "backend": "flydsl"},
    }


FLYDSL_MIGRATION = register_migration(Migration("flydsl-1", SCHEMA_VERSION, _from_flydsl))


def import_flydsl_file(path: str | Path) -> Artifact:
    """Load a FlyDSL file as an artifact.

    Like FlyDSL's own loader, the file's ``version`` must be exactly the int 1, and a
    file named ``<name>-<64 hex>.json`` must carry the identity that digest names.
    Raises :class:`ArtifactError` naming the file and field.
    """
    from flyconfigs.schema.jsonio import read_document
    from flyconfigs.schema.load import parse_artifact

    p = Path(path)
    data = read_document(p)
    if not isinstance(data, dict) or type(data.get("version")) is not int or data.get("version") != 1:
        raise ArtifactError(str(p), [FieldProblem("version", "a FlyDSL artifact needs version exactly 1")])
    return parse_artifact(data, str(p))[0]
