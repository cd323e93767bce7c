"""Running code under the compile-only ROCm prefix (scripts/rocm-prefix.sh).

hipRTC needs its libraries loaded through the prefix's own dynamic loader, so these
tests run their payload in a child Python started through the prefix's ``run`` script
and read one JSON line back."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PREFIX = Path(os.environ.get("FLYCONFIGS_ROCM_PREFIX", Path.home() / ".cache" / "flyconfigs" / "rocm-prefix"))
needs_prefix = pytest.mark.skipif(
    not (PREFIX / "run").exists() or importlib.util.find_spec("hip") is None,
    reason=f"needs hip-python (the hip extra) and the ROCm compile-only prefix at {PREFIX} (scripts/rocm-prefix.sh)",
)


PREFIX6 = Path(os.environ.get("FLYCONFIGS_ROCM6_PREFIX", Path.home() / ".cache" / "flyconfigs" / "rocm6-prefix"))
"""The ROCm 6 prefix (scripts/rocm-prefix.sh builds it too), whose hipRTC knows gfx950."""
needs_prefix6 = pytest.mark.skipif(
    not (PREFIX6 / "run").exists() or importlib.util.find_spec("hip") is None,
    reason=f"needs hip-python (the hip extra) and the ROCm 6 compile-only prefix at {PREFIX6} (scripts/rocm-prefix.sh)",
)


def run_in_prefix(code: str, timeout: float = 600, prefix: Path = PREFIX) -> Any:
    """Run ``code`` under ``prefix``; it must print one JSON value last."""
    # Run from / so the checkout's source folders never shadow the installed package.
    done = subprocess.run([str(prefix / "run"), sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd="/")
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
