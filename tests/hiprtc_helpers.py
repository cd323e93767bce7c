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


def run_in_prefix(code: str, timeout: float = 600) -> Any:
    """Run ``code`` under the prefix; it must print one JSON value last."""
    # Run from / so the checkout's source folders never shadow the installed package.
    done = subprocess.run([str(PREFIX / "run"), sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd="/")
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
