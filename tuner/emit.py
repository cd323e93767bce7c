"""Emitting artifacts: one schema-valid file per key, written atomically into the
output folder (the layout ``FLYCONFIGS_PATH`` and ``flyconfigs publish`` read), and the
resume check."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from flyconfigs.errors import ArtifactError, TuneError
from flyconfigs.registry.checks.check import winner_refusal
from flyconfigs.registry.checks.replacing import replacement_refusal
from flyconfigs.schema.canonical import same_value
from flyconfigs.schema.jsonio import remove_stale_temporaries, write_atomic
from flyconfigs.schema.load import load_artifact
from flyconfigs.schema.models import Artifact, DeviceIdentity, artifact_file_name
from flyconfigs.schema.pack import packed_row

__all__ = ["already_tuned", "check_writable", "git_revision", "now_utc", "write_artifact"]


CODE_PATHS = ("pyproject.toml", "flyconfigs", "schema", "registry", "kernels", "tuner", "publish", "adapters")
"""The checkout's paths that hold the package's code: ``pyproject.toml`` and the source
folders its ``package-dir`` maps."""


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@functools.cache
def git_revision() -> str | None:
    """The revision (12 hex digits of ``HEAD``) of the flyconfigs checkout this code
    runs from, else ``None``: an installed copy records none, even inside another
    project's git repository (a ``.venv`` in it), and so does a checkout whose code
    (:data:`CODE_PATHS`) differs from ``HEAD``.  Asked of git once per process."""
    return _checkout_revision(Path(__file__).resolve())


def _checkout_revision(this_file: Path) -> str | None:
    """``HEAD`` of the repository whose root holds ``this_file`` as its own tracked
    ``tuner/emit.py`` (the checkout's layout) when none of :data:`CODE_PATHS` differs
    from it, else ``None``."""
    root = this_file.parents[1]
    try:
        found = subprocess.run(["git", "rev-parse", "--show-toplevel", "--short=12", "HEAD"], cwd=root,
                               capture_output=True, text=True, timeout=5)
        if found.returncode != 0 or len(found.stdout.split("\n")) < 2:
            return None
        top, revision = found.stdout.split("\n")[:2]
        # The enclosing repository must be flyconfigs' own: its root is this package's
        # source root and it tracks this very file (an installed copy is in neither).
        if Path(top).resolve() != root:
            return None
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "--", this_file.relative_to(root).as_posix()],
                                 cwd=root, capture_output=True, text=True, timeout=5)
        if tracked.returncode != 0:
            return None
        # HEAD names the code only when none of the package's source folders differs from
        # it: a checkout with edits (or a copy of the files beside an older .git) ran code
        # no revision holds.  Data, results and docs written since change no code.
        changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *CODE_PATHS], cwd=root,
                                 capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return revision.strip() or None if changed.returncode == 0 else None


def host() -> str:
    return socket.gethostname() or "unknown"


def command_line() -> list[str]:
    """The command that ran, as a user would type it (``python -m flyconfigs`` is
    ``flyconfigs``), with its absolute paths made portable (:func:`portable_argument`)."""
    if not sys.argv:
        return []
    program = os.path.basename(sys.argv[0])
    return ["flyconfigs" if program == "__main__.py" else program, *map(portable_argument, sys.argv[1:])]


def portable_argument(argument: str) -> str:
    """``argument`` with an absolute path in it (the whole argument, or the value of
    ``--option=PATH``) cut to its last part behind ``.../``: which folder a run wrote or
    read, not where one machine keeps it.  Other arguments are returned unchanged."""
    option, equals, value = argument.partition("=") if argument.startswith("--") else ("", "", argument)
    if not os.path.isabs(value):
        return argument
    name = os.path.basename(os.path.normpath(value))
    return f"{option}{equals}.../{name}" if name else argument


def check_writable(folder: Path) -> None:
    """Create ``folder`` if needed and prove it writable, removing the temporary files
    a killed run left behind; :class:`TuneError` if it cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(folder)
        probe = folder / f".flyconfigs-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise TuneError(f"cannot write artifacts into {folder}: {exc.strerror or exc}") from None


def write_artifact(folder: Path, artifact: Artifact) -> Path:
    """Write ``artifact`` as ``<folder>/<artifact.file_name()>``, atomically.

    Raises :class:`TuneError` when the loader would refuse its winner (the family's own
    check, or its binding: nothing is written that could never serve) and when the file
    there says more than a prediction does (a prediction never replaces a measured or
    imported artifact, nor one of a newer schema;
    :func:`~flyconfigs.registry.checks.replacing.replacement_refusal`)."""
    why = winner_refusal(artifact)
    if why is not None:
        raise TuneError(f"{artifact.kernel.name} {dict(artifact.key)}: the winner would never be served ({why}); "
                        "not written")
    target = folder / artifact.file_name()
    why = replacement_refusal(target, artifact.selection.rule)
    if why is not None:
        raise TuneError(f"{target}: {why}")
    return write_atomic(target, artifact.to_json_bytes())


def already_tuned(folder: Path, kernel: str, key: dict[str, Any], identity: DeviceIdentity,
                  source_sha256: str, backend_versions: dict[str, str]) -> bool:
    """Whether ``folder`` holds a valid artifact for this key and device made from the
    same kernel source with the same toolchain (what ``--resume`` skips): a single file,
    or a row of one of its packs (schema 1.7)."""
    path = folder / artifact_file_name(kernel, identity, key)
    if path.is_file():
        try:
            found: Artifact | None = load_artifact(path)
        except ArtifactError:
            return False
    else:
        found = packed_row(folder, kernel, identity, key)
    if found is None:
        return False
    return (
        found.kernel.name == kernel
        and same_value(found.key, key)
        and found.device.identity == identity
        and found.kernel.source_sha256 == source_sha256
        and found.provenance.backend_versions == backend_versions
    )
