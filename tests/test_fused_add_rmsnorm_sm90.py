"""Every Triton config the fused family's space offers at a few keys compiles for sm90
without a GPU (Triton's compiler, NVIDIA's ptxas) without spilling, and ``eviction``
``stream`` is what puts cache operators into its PTX (evict-first and evict-last loads,
streaming stores), ``none`` none.  Run in a child process: this one runs Triton's
interpreter (``tests/triton_sm90.py`` does the compiling)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent


def _ptxas() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    own = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    return str(own) if own.exists() else shutil.which("ptxas")


@pytest.mark.skipif(_ptxas() is None, reason="no ptxas for Triton to assemble with here")
@pytest.mark.parametrize(("m", "n", "dtype"), [(96, 4352, "bf16"), (5, 2880, "fp16"), (4, 12288, "fp32")])
def test_every_triton_config_compiles_for_sm90_without_spilling(tmp_path: Path, m: int, n: int, dtype: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_PTXAS_PATH=str(_ptxas()), TRITON_CACHE_DIR=str(tmp_path / "triton"))
    done = subprocess.run([sys.executable, str(HERE / "triton_sm90.py"), str(m), str(n), dtype], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) >= 20
    for row in rows:
        config = row["config"]
        assert row["local_bytes"] == 0, row
        hinted = (row["evict_first"], row["evict_last"], row["streaming_stores"])
        if config["eviction"] == "stream":
            assert all(hinted), row
        else:
            assert not any(hinted), row
