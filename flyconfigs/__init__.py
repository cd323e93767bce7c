"""flyconfigs: tuned GPU-kernel configurations, shipped as data packages.

``resolve(kernel, key, device=None)`` answers which config a kernel should run for a key
on a device, and where that answer came from.  Importing flyconfigs never imports torch
or a GPU runtime, and imports nothing else until a name below is first used: each
subpackage (``flyconfigs.schema``, ``flyconfigs.registry``, …) imports only what it uses.
"""

from __future__ import annotations

import os as _os
from importlib import import_module
from typing import TYPE_CHECKING, Any

from flyconfigs._version import __version__

# In a checkout the subpackages are the design's top-level folders beside this one
# (``schema/``, ``registry/``, ...), which setuptools' package-dir maps into an installed
# ``flyconfigs``.  A Python started in the checkout's root imports this folder first and,
# without this, would find no subpackage in it (or mix in an installed copy's); with it the
# checkout imports whole.  An installed package holds its subpackages and skips this.
if not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), "registry")):
    _root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    if _os.path.isfile(_os.path.join(_root, "pyproject.toml")) and _os.path.isfile(
            _os.path.join(_root, "registry", "__init__.py")):
        __path__.append(_root)

if TYPE_CHECKING:
    from flyconfigs.errors import FlyconfigsError
    from flyconfigs.registry import Resolution, add_observer, explain, refresh, resolve
    from flyconfigs.schema import SCHEMA_VERSION, Artifact, Device, DeviceIdentity, load_artifact

__all__ = [
    "SCHEMA_VERSION",
    "Artifact",
    "Device",
    "DeviceIdentity",
    "FlyconfigsError",
    "Resolution",
    "__version__",
    "add_observer",
    "explain",
    "load_artifact",
    "refresh",
    "resolve",
]

_LAZY = {
    "FlyconfigsError": "flyconfigs.errors",
    "Resolution": "flyconfigs.registry",
    "add_observer": "flyconfigs.registry",
    "explain": "flyconfigs.registry",
    "refresh": "flyconfigs.registry",
    "resolve": "flyconfigs.registry",
    "SCHEMA_VERSION": "flyconfigs.schema.models",
    "Artifact": "flyconfigs.schema.models",
    "Device": "flyconfigs.schema.models",
    "DeviceIdentity": "flyconfigs.schema.models",
    "load_artifact": "flyconfigs.schema.load",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flyconfigs' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
