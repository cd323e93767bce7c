"""flyconfigs: tuned GPU-kernel configurations, shipped as data packages.

``resolve(kernel, key, device=None)`` answers which config a kernel should run for a key
on a device, and where that answer came from.  Importing flyconfigs never imports torch
or a GPU runtime.
"""

from flyconfigs.errors import FlyconfigsError
from flyconfigs.registry import Resolution, add_observer, explain, refresh, resolve
from flyconfigs.schema import SCHEMA_VERSION, Artifact, Device, DeviceIdentity, load_artifact

__version__ = "1.0.0"

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
