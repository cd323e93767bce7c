"""Whether NVIDIA's NVRTC can compile here (no GPU needed), for the tests marked ``nvrtc``."""

from __future__ import annotations

import pytest

from flyconfigs.errors import BackendUnavailableError


def nvrtc_missing() -> str | None:
    """Why NVRTC cannot compile in this environment, or None when it can."""
    try:
        from flyconfigs.gpu.cuda import CudaBinding

        CudaBinding().compiler_version()
    except (BackendUnavailableError, ImportError, RuntimeError) as exc:
        return f"NVRTC is not loadable here ({exc}); scripts/test.sh installs it"
    return None


MISSING = nvrtc_missing()
needs_nvrtc = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
"""Skip a test where NVRTC cannot compile, saying why."""
