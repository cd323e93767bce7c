"""The registry's settings: the ``FLYCONFIGS_*`` environment variables, read in this
module and nowhere else.

A resolver reads them once per :meth:`~flyconfigs.registry.Resolver.refresh` (its
:class:`~flyconfigs.registry.core.environment.Environment` snapshot holds the
:class:`Settings`); a function called without a snapshot reads them when called.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["DETECTOR_ENV", "DEVICE_ENV", "KERNEL_OWNERS_ENV", "NO_DETECT_ENV", "PACKAGES_ENV", "PATH_ENV", "Settings",
           "read_settings"]

PATH_ENV = "FLYCONFIGS_PATH"
"""Override directories, ``os.pathsep``-separated, first wins."""
PACKAGES_ENV = "FLYCONFIGS_PACKAGES"
"""Comma-separated distribution names, first wins: the packages a user ranks on purpose."""
KERNEL_OWNERS_ENV = "FLYCONFIGS_KERNELS"
"""``NAME=DISTRIBUTION[,…]``: which distribution's declaration a kernel name means when
several distributions declare it."""
DEVICE_ENV = "FLYCONFIGS_DEVICE"
"""The device to resolve for instead of the detected one."""
DETECTOR_ENV = "FLYCONFIGS_DETECTOR"
"""The distribution whose ``flyconfigs.detectors`` entry point detects the GPU, when the
user wants another than flyconfigs' own."""
NO_DETECT_ENV = "FLYCONFIGS_NO_GPU_DETECT"
"""Set (to anything but the empty string): never detect the GPU."""


@dataclass(frozen=True)
class Settings:
    """The value of each setting, ``""`` when it is not set."""

    path: str = ""
    packages: str = ""
    kernels: str = ""
    device: str = ""
    detector: str = ""
    no_gpu_detect: str = ""


def read_settings() -> Settings:
    """Every setting, as the environment holds it now."""
    env = os.environ
    return Settings(env.get(PATH_ENV, ""), env.get(PACKAGES_ENV, ""), env.get(KERNEL_OWNERS_ENV, ""),
                    env.get(DEVICE_ENV, ""), env.get(DETECTOR_ENV, ""), env.get(NO_DETECT_ENV, ""))
