"""The exceptions flyconfigs raises.

Every error derives from :class:`FlyconfigsError`; concrete types also derive from the
builtin that fits (``ValueError`` for bad data, ``LookupError`` for things not found,
``RuntimeError`` for a missing GPU runtime), so callers can catch either.  Errors carry
structured fields (the file, the field path, the distribution) as well as a message that
names the bad value and where it came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "AmbiguousKernelError",
    "ArtifactError",
    "BackendUnavailableError",
    "CompileError",
    "ConfigurationError",
    "FieldProblem",
    "FitError",
    "FlyconfigsError",
    "GPUError",
    "GPURuntimeMissingError",
    "InvalidDeviceError",
    "InvalidKeyError",
    "KernelPluginError",
    "LaunchError",
    "ManifestError",
    "PublishError",
    "TuneError",
    "UnknownArchError",
    "UnknownKernelError",
    "UnsupportedSchemaVersionError",
]


class FlyconfigsError(Exception):
    """Root of every exception flyconfigs raises on purpose."""


@dataclass(frozen=True)
class FieldProblem:
    """One problem in a document: where (a dotted field path, ``""`` for the whole
    document) and what."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field or '<document>'}: {self.message}"


class ArtifactError(FlyconfigsError, ValueError):
    """A document (artifact, manifest, FlyDSL file) is malformed or invalid.

    ``file`` names its origin (a path, or ``<bytes>``); ``problems`` lists every field
    problem found, each with its dotted field path.
    """

    def __init__(self, file: str, problems: Sequence[FieldProblem]) -> None:
        self.file = file
        self.problems = tuple(problems)
        super().__init__(self._render())

    @property
    def field(self) -> str:
        """The field path of the first problem."""
        return self.problems[0].field if self.problems else ""

    def _render(self) -> str:
        if len(self.problems) == 1:
            return f"{self.file}: {self.problems[0]}"
        lines = "; ".join(str(p) for p in self.problems)
        return f"{self.file}: {len(self.problems)} problems: {lines}"


class UnsupportedSchemaVersionError(ArtifactError):
    """The document's schema major is newer than this reader supports."""

    def __init__(self, file: str, found: str, supported: str) -> None:
        self.found = found
        self.supported = supported
        super().__init__(
            file,
            [
                FieldProblem(
                    "schema_version",
                    f"schema version {found!r} is newer than this flyconfigs supports "
                    f"(major {supported.split('.')[0]}, up to {supported}); upgrade flyconfigs",
                )
            ],
        )


class ManifestError(ArtifactError):
    """A data package's manifest is malformed, or its rows point at bad files."""

    def __init__(self, file: str, problems: Sequence[FieldProblem], distribution: str = "") -> None:
        self.distribution = distribution
        super().__init__(file, problems)


class InvalidDeviceError(ArtifactError):
    """A device spec (the ``device`` argument, ``--device`` or ``FLYCONFIGS_DEVICE``) is
    malformed; ``file`` names where it came from."""


class InvalidKeyError(FlyconfigsError, ValueError):
    """A key does not fit the kernel's declared key axes."""


class UnknownKernelError(FlyconfigsError, LookupError):
    """No kernel of that name is declared (entry-point group ``flyconfigs.kernels``)."""


class KernelPluginError(FlyconfigsError, RuntimeError):
    """A kernel declaration's own code raised (or answered nonsense) where the registry
    needed its answer and has nothing to fall back on: its ``name``, or its
    ``default_config`` when no artifact serves the call.  ``kernel`` is the kernel's
    name as asked, ``origin`` where the declaration came from (the entry point and its
    distribution), ``member`` the member that failed and ``what`` what it did."""

    def __init__(self, kernel: str, origin: str, member: str, what: str) -> None:
        self.kernel = kernel
        self.origin = origin
        self.member = member
        self.what = what
        super().__init__(f"kernel {kernel!r} ({origin}): its {member} {what}")


class AmbiguousKernelError(UnknownKernelError):
    """Several distributions declare a kernel of one name and none was chosen; the
    message names them and the setting that chooses."""


class ConfigurationError(FlyconfigsError, ValueError):
    """An environment variable or setting holds a value flyconfigs cannot use; the
    message names the variable."""


class PublishError(FlyconfigsError, ValueError):
    """A data package cannot be built or uploaded; nothing was left behind."""

    def __init__(self, message: str, file: str = "") -> None:
        self.file = file
        super().__init__(f"{file}: {message}" if file else message)


class TuneError(FlyconfigsError, ValueError):
    """A tuning run cannot start or cannot write its results."""


class GPUError(FlyconfigsError, RuntimeError):
    """Root of the GPU layer's errors."""


class BackendUnavailableError(GPUError):
    """The backend's Python bindings or its runtime library are absent."""


class GPURuntimeMissingError(BackendUnavailableError):
    """No GPU runtime is installed: a backend's Python bindings (``extras`` names the
    flyconfigs extras that bring them, ``hip`` or ``cuda``) or the vendor's runtime
    library (ROCm, the NVIDIA driver) are absent.  A GPU runtime that is installed but
    sees no device raises plain :class:`BackendUnavailableError`."""

    def __init__(self, message: str, extras: Sequence[str] = ()) -> None:
        self.extras = tuple(extras)
        super().__init__(message)


class UnknownArchError(GPUError, ValueError):
    """An architecture name the backend cannot compile for."""


class CompileError(GPUError):
    """The runtime compiler rejected the source; ``log`` holds its full output."""

    def __init__(self, message: str, log: str = "") -> None:
        self.log = log
        super().__init__(f"{message}\n{log}".rstrip() if log else message)


class LaunchError(GPUError):
    """A kernel launch was refused (bad arguments) or failed on the device."""


class FitError(FlyconfigsError, ValueError):
    """The tunings a model or a default table is fitted on cannot be used (none measured,
    or several devices' mixed without naming one); the message names the folder."""
