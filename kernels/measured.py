"""Reading measured tunings back: one device's artifacts of one kernel from a folder, and
which of the tuner's timing protocols timed a candidate.

What a fitted table, a cost model and a benchmark that compares tunings all need before
they compute anything.  A figure never mixes two devices' tunings: a folder holding
several is refused unless one product is named.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from flyconfigs.errors import FitError
from flyconfigs.schema import Artifact, Candidate
from flyconfigs.schema.pack import read_artifacts

__all__ = ["artifacts_of", "timed_in"]


def artifacts_of(folder: str | Path, kernel: str | None, product: str | None = None,
                 option: str = "--product") -> list[tuple[Path, Artifact]]:
    """``folder``'s artifacts of ``kernel`` (of every kernel when ``None``) with their
    paths (a pack's for its rows), in the order of the files' names (a pack's rows in
    that of their artifacts' own file names); only ``product``'s when it is given.

    Raises :class:`~flyconfigs.errors.FitError` naming ``folder`` when it is not a
    folder, and ``option`` when, without ``product``, the folder holds several kernels'
    or several products' artifacts, and :class:`~flyconfigs.errors.ArtifactError` for a
    file that is not a valid artifact."""
    root = Path(folder)
    if not root.is_dir():
        # A mistyped folder globs to nothing, which would read as "no tunings".
        raise FitError(f"{folder}: no such folder")
    # Single files and packs alike (a pack's rows come with its path, candidates read
    # from its measurements), in the order of the files' names, a pack's rows in that of
    # the names their artifacts would have as files.
    everything, _ = read_artifacts(root, kernel)
    found = sorted(((path, a) for a, path in everything.values()
                    if kernel in (None, a.kernel.name) and product in (None, a.device.product)),
                   key=lambda item: (item[0].name, item[1].file_name()))
    _one_of(root, "kernels", (a.kernel.name for _, a in found), "--kernel")
    _one_of(root, "products", (a.device.product for _, a in found), option)
    return found


def _one_of(folder: Path, what: str, values: Iterable[str | None], option: str) -> None:
    distinct = {str(v) for v in values}
    if len(distinct) > 1:
        raise FitError(f"{folder}: artifacts of several {what} ({', '.join(sorted(distinct))}); name one with {option}")


def timed_in(candidate: Candidate, artifact: Artifact) -> Literal["screen", "final"]:
    """``final`` or ``screen``: the protocol that timed ``candidate`` (a timed candidate
    of ``artifact``).

    Schema 1.2 records it (``timed_in``); for a file made before 1.2 it is ``final``
    when the candidate's sample count is the final protocol's.  A screen time is a
    shorter measurement than a final one and can read lower without the config being
    faster, so any figure that compares two candidates says which each was."""
    if candidate.timed_in is not None:
        return candidate.timed_in
    protocol = artifact.provenance.timing_protocol
    timing = candidate.timing
    # Before 1.2 only the sample count tells the two apart: the final takes the
    # protocol's full count, the screen a few.
    return "final" if protocol is not None and timing is not None and timing.samples == protocol.samples else "screen"
