"""pydantic's plugin loader, kept from failing on what another distribution installed.

The first time pydantic builds a model it loads its plugins (entry-point group
``pydantic``) through ``importlib.metadata.entry_points()``, which reads every installed
distribution's ``entry_points.txt``: one malformed file makes that raise out of the model
class's definition (so ``import flyconfigs`` would fail), and one that is a FIFO or
``/dev/zero`` hangs it.  :func:`load_plugins_safely` runs before flyconfigs defines its
models.  It changes nothing when every distribution is readable or the user already
disabled pydantic's plugins (``PYDANTIC_DISABLE_PLUGINS``).  Otherwise it loads them
through pydantic's own loader where that is safe and catches its failure; when it is not
safe or fails, pydantic's plugins are off for this process (pydantic itself leaves them off
after such a failure) and one warning names the distribution responsible.  Only if
pydantic no longer has the loader this relies on does it set
``PYDANTIC_DISABLE_PLUGINS=__all__`` in the process environment, and the warning says so.
"""

from __future__ import annotations

import logging
import os
from importlib import metadata
from typing import Any

from flyconfigs.schema.distfiles import ENTRY_POINTS_FILE, metadata_file_problem, metadata_folder

__all__ = ["DISABLE_ENV", "load_plugins_safely"]

DISABLE_ENV = "PYDANTIC_DISABLE_PLUGINS"
logger = logging.getLogger("flyconfigs.schema")


def _loader() -> Any:
    try:
        # pydantic's loader module is private; its cache and get_plugins are what
        # pydantic itself calls.  Without them the documented variable is the fallback.
        from pydantic.plugin import _loader as loader
    except ImportError:
        return None
    return loader if hasattr(loader, "get_plugins") and hasattr(loader, "_plugins") else None


def _blocking_distribution() -> str | None:
    """The first distribution whose ``entry_points.txt`` pydantic must not read, and why."""
    for dist in metadata.distributions():
        why = metadata_file_problem(dist, ENTRY_POINTS_FILE)
        if why is not None:
            return f"{metadata_folder(dist)}: {why}"
    return None


def _culprit() -> str:
    """``"FOLDER: "`` of the first distribution whose entry points cannot be parsed."""
    for dist in metadata.distributions():
        try:
            dist.entry_points  # noqa: B018 - parsing is the point
        except Exception:  # noqa: BLE001 - this is the one being looked for
            return f"{metadata_folder(dist) or dist}: "
    return ""


def load_plugins_safely() -> None:
    """Load pydantic's plugins now, unless that would hang or fail; see the module's
    docstring.  Never raises."""
    if os.environ.get(DISABLE_ENV) in ("__all__", "1", "true"):
        return
    loader = _loader()
    if loader is not None and loader._plugins is not None:
        return  # pydantic already loaded them: whatever was wrong did not stop it
    why = _blocking_distribution()
    if why is None and loader is not None:
        try:
            loader.get_plugins()
            return
        except Exception as exc:  # noqa: BLE001 - another distribution's broken metadata
            why = f"{_culprit()}reading the installed distributions' entry points raised {type(exc).__name__}: {exc}"
    if why is None:
        return
    if loader is not None:
        loader._plugins = {}
        logger.warning("pydantic plugins are not loaded in this process: %s", why)
    else:
        os.environ[DISABLE_ENV] = "__all__"
        logger.warning("pydantic plugins are not loaded in this process (%s=__all__ was set): %s", DISABLE_ENV, why)
