"""Checking data the way the loader reads it, eagerly: a data package folder (its
manifest and every row's file, hash, identity and target) and an artifact's winner
against its kernel's declaration.  ``flyconfigs validate`` is a thin layer over this."""

from __future__ import annotations

from pathlib import Path

from flyconfigs.errors import UnknownKernelError
from flyconfigs.registry.declarations import check_config, kernel_declaration
from flyconfigs.registry.device import DeviceQuery
from flyconfigs.registry.problems import Problem, ProblemLog
from flyconfigs.registry.sources import Source, read_package_folder
from flyconfigs.schema.models import Artifact

__all__ = ["check_package_folder", "check_winner"]


def check_winner(artifact: Artifact, where: str, problems: ProblemLog, distribution: str | None = None) -> list[str]:
    """Report (``invalid-config``) a winner the artifact's kernel refuses for its own key
    and device, when this environment declares the kernel, and (``kernel-name-clash``)
    an artifact whose key has other axes than the declared kernel of its name (such as
    a FlyDSL kernel imported under a name flyconfigs also declares); returns notes for
    what was not checked or deserves saying (an artifact made by a test double)."""
    notes = []
    if artifact.from_test_double:
        notes.append("made by a test double (backend simulated): never published or served to a real device")
    try:
        decl = kernel_declaration(artifact.kernel.name, problems)
    except UnknownKernelError as exc:
        return [*notes, f"winner not checked: {exc}"]
    axes = [axis.name for axis in decl.key_axes]
    if sorted(artifact.key) != sorted(axes):
        how = "imported " if artifact.selection.rule == "imported" else ""
        problems.report(Problem(
            "kernel-name-clash", where,
            f"this {how}artifact names kernel {decl.name!r} but keys it by ({', '.join(sorted(artifact.key))}), "
            f"while the declared {decl.name!r} takes ({', '.join(axes)}): another kernel under the same name, "
            f"never served for this one; give it a name of its own", distribution))
        return notes
    why = check_config(decl, artifact.winner.config, dict(artifact.key), DeviceQuery.of(artifact.device.identity))
    if why is not None:
        problems.report(Problem("invalid-config", where, f"{decl.name} refuses the winner: {why}", distribution))
    return notes


def check_package_folder(folder: Path) -> tuple[list[Problem], list[str]]:
    """Every problem the loader would meet in the data package whose manifest is in
    ``folder`` (the version rule, the manifest, each row's file, sha256, identity and
    target, each winner its kernel refuses), and notes."""
    problems = ProblemLog()
    package = read_package_folder(folder, None, Source("override", str(folder), 0), problems)
    notes: list[str] = []
    for entry in package.entries if package is not None else []:
        artifact = entry.load(problems)
        if artifact is not None:
            notes.extend(check_winner(artifact, str(entry.path), problems))
    return problems.problems(), notes
