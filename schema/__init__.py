"""flyconfigs.schema: the versioned artifact format.

Models (:class:`Artifact`, :class:`Device`, :class:`Manifest`, …), canonical JSON and
content hashes, versions and migrations (FlyDSL's format among them), and the reader that
turns untrusted files into validated artifacts or one precise
:class:`~flyconfigs.errors.ArtifactError`.
"""

from typing import TYPE_CHECKING, Any

from flyconfigs.schema.pydantic_plugins import load_plugins_safely as _load_plugins_safely

# Before the first model is defined: pydantic's plugin loader reads every distribution's
# entry points then, and another distribution's broken file must not fail this import.
_load_plugins_safely()

from flyconfigs.schema import flydsl as _flydsl  # noqa: E402, F401  (registers its migration)
from flyconfigs.schema.canonical import canonical_bytes, content_hash, sha256_hex  # noqa: E402
from flyconfigs.schema.jsonio import MAX_DEPTH, MAX_DOCUMENT_BYTES, parse_document, read_document, write_atomic  # noqa: E402
from flyconfigs.schema.load import LoadReport, load_artifact, loads_artifact, parse_artifact  # noqa: E402
from flyconfigs.schema.models import (  # noqa: E402
    SCHEMA_VERSION,
    Artifact,
    Candidate,
    CandidateStatus,
    Choice,
    Config,
    Device,
    DeviceIdentity,
    KernelRef,
    Key,
    Provenance,
    Resources,
    ScreenProtocol,
    Selection,
    Timing,
    TimingProtocol,
    Vendor,
)
from flyconfigs.schema.versions import Migration, migrations, register_migration, upgrade  # noqa: E402

if TYPE_CHECKING:
    from flyconfigs.schema.manifest import MANIFEST_FILE, Manifest, ManifestRow, target_module

# A data package's manifest is read only where a package is: its models (a few ms to
# build) are imported on first use, so a resolve from FLYCONFIGS_PATH does without them.
_LAZY = {"MANIFEST_FILE", "Manifest", "ManifestRow", "target_module"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'flyconfigs.schema' has no attribute {name!r}")
    from flyconfigs.schema import manifest

    value = getattr(manifest, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

__all__ = [
    "MANIFEST_FILE",
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "SCHEMA_VERSION",
    "Artifact",
    "Candidate",
    "CandidateStatus",
    "Choice",
    "Config",
    "Device",
    "DeviceIdentity",
    "KernelRef",
    "Key",
    "LoadReport",
    "Manifest",
    "ManifestRow",
    "Migration",
    "Provenance",
    "Resources",
    "ScreenProtocol",
    "Selection",
    "Timing",
    "TimingProtocol",
    "Vendor",
    "canonical_bytes",
    "content_hash",
    "load_artifact",
    "loads_artifact",
    "migrations",
    "parse_artifact",
    "parse_document",
    "read_document",
    "register_migration",
    "sha256_hex",
    "target_module",
    "upgrade",
    "write_atomic",
]
