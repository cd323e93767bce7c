"""The loader path stays light: importing flyconfigs and resolving never imports torch
or a GPU runtime, and needs nothing beyond pydantic and packaging."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CODE = """
import sys
import flyconfigs, flyconfigs.registry, flyconfigs.schema, flyconfigs.kernels
r = flyconfigs.resolve("rmsnorm", {"M": 8, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}, device="sm90:132:NVIDIA H200")
assert r.source == "default", r
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {"torch", "cuda", "hip", "numpy", "triton", "platformdirs", "tqdm"})
print(",".join(heavy))
"""


def test_import_and_resolve_pull_in_no_heavy_module(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_runtime_dependencies_are_only_pydantic_and_packaging() -> None:
    from importlib.metadata import requires

    base = [r for r in requires("flyconfigs") or [] if "extra ==" not in r]
    assert sorted(r.split(">")[0].split("<")[0].split("=")[0].strip() for r in base) == ["packaging", "pydantic"]
