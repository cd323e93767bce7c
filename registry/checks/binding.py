"""Whether an artifact is bound to the kernel family installed now.

An artifact records the family version and the sha256 of the source it was tuned
with (``kernel.version``, ``kernel.source_sha256``).  :func:`binding_problem` is the one
function that decides whether the installed declaration still serves it; the loader,
``flyconfigs validate``, ``explain`` and ``doctor`` all ask it, so they give one answer.
"""

from __future__ import annotations

from collections.abc import Callable

from flyconfigs.registry.core.guard import Raised, guarded
from flyconfigs.registry.families.contract import KernelDecl
from flyconfigs.schema.models import KernelRef

__all__ = ["binding_problem"]


def binding_problem(decl: KernelDecl, kernel: KernelRef, rule: str | None = None,
                    digest: Callable[[], str | None] | None = None) -> str | None:
    """Why an artifact of ``kernel`` (its ``kernel`` field) is stale for ``decl``, or
    ``None`` when ``decl`` serves it.

    - ``kernel.version`` must be ``decl.version`` or one of ``decl.compatible_versions``;
    - under ``decl.source_binding == "exact"`` a recorded ``source_sha256`` must equal
      ``decl.source_sha256()``; under ``"version"`` any source of an accepted version
      serves.  A family that declares no source makes nothing stale by source; an
      artifact that records none is stale under exact binding unless it was imported
      from a format that records none (``rule`` ``imported``, or not given): a measured
      or predicted artifact always knows what it was tuned with.

    ``digest`` gives the family's source digest (a loaded kernel's, asked once);
    default: ``decl.source_sha256()``.
    """
    # A member that raises leaves nothing proven: not served.
    why = guarded(_problem, decl, kernel, rule, digest or decl.source_sha256)
    if isinstance(why, Raised):
        return f"{kernel.name}'s declaration raised {type(why.exc).__name__} while its binding was checked: {why.exc}"
    return why


def _problem(decl: KernelDecl, kernel: KernelRef, rule: str | None, digest: Callable[[], str | None]) -> str | None:
    if kernel.version != decl.version and kernel.version not in decl.compatible_versions:
        accepted = sorted({decl.version, *decl.compatible_versions})
        return (f"tuned for {decl.name} version {kernel.version}, but the installed {decl.name} is version "
                f"{decl.version} (serves {', '.join(map(str, accepted))})")
    if decl.source_binding == "exact" and kernel.source_sha256 is None and rule not in (None, "imported"):
        if digest() is not None:
            return (f"records no {decl.name} source sha256 although it was {'predicted' if rule == 'predicted' else 'measured'}, "
                    f"and {decl.name} binds artifacts to their exact source")
    if decl.source_binding == "exact" and kernel.source_sha256 is not None:
        current = digest()
        if current is not None and current != kernel.source_sha256:
            return (f"tuned with {decl.name} source sha256 {kernel.source_sha256[:12]}…, but the installed source is "
                    f"{current[:12]}… and {decl.name} binds artifacts to their exact source")
    return None
