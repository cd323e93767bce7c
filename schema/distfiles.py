"""Other distributions' metadata files, checked before anything reads them.

``importlib.metadata`` reads a distribution's ``entry_points.txt`` or ``METADATA``
whole, with a blocking ``open``: one that is a FIFO never returns, ``/dev/zero`` never
ends, and a huge file is read into memory.  Any installed distribution can leave such a
file, so flyconfigs (and the pydantic plugin guard) look at each file with ``stat``
first, which never blocks, and read only regular files of a sane size.
"""

from __future__ import annotations

import os
import stat
from importlib import metadata

__all__ = ["ENTRY_POINTS_FILE", "METADATA_LIMITS", "metadata_folder", "metadata_file_problem"]

ENTRY_POINTS_FILE = "entry_points.txt"
METADATA_LIMITS = {ENTRY_POINTS_FILE: 1 << 20, "METADATA": 16 << 20, "PKG-INFO": 16 << 20, "": 16 << 20}
"""The most bytes flyconfigs lets ``importlib.metadata`` read of each file (the largest
real ones are tens of kilobytes of entry points and a few megabytes of description);
``""`` is the metadata path itself, which is read as the metadata when it is a file (an
old ``.egg-info`` file, as distutils and some system packages install)."""


def metadata_folder(dist: metadata.Distribution) -> str | None:
    """The ``.dist-info`` (or ``.egg-info``) folder of a distribution found on the file
    system, or ``None`` for one that lives elsewhere (a zip, a custom finder)."""
    path = getattr(dist, "_path", None)  # PathDistribution's folder; no public accessor exists
    return os.fspath(path) if isinstance(path, (str, os.PathLike)) else None


def metadata_file_problem(dist: metadata.Distribution, name: str) -> str | None:
    """Why reading ``dist``'s metadata file ``name`` (``""``: the metadata path itself)
    could block, never end or exhaust memory (a FIFO, a device, over
    :data:`METADATA_LIMITS`), or ``None`` when it is a regular file of a sane size, is
    missing, or the distribution does not live on the file system.  Never opens the file."""
    folder = metadata_folder(dist)
    if folder is None:
        return None
    try:
        info = os.stat(os.path.join(folder, name) if name else folder)
    except (FileNotFoundError, NotADirectoryError):  # importlib.metadata reads these as missing too
        return None
    except OSError as exc:
        return f"{name or 'its metadata'} cannot be read: {exc.strerror or exc}"
    if not name and stat.S_ISDIR(info.st_mode):
        return None
    if not stat.S_ISREG(info.st_mode):
        return f"{name or 'its metadata'} cannot be read: not a regular file"
    limit = METADATA_LIMITS.get(name, 1 << 20)
    if info.st_size > limit:
        return f"{name or 'its metadata'} is {info.st_size} bytes, over the limit of {limit}"
    return None
