"""``scripts/demo.py``, the README's first command, on a small folder of artifacts: it
publishes, serves, installs and explains, and leaves nothing behind in the temporary
folder unless ``--keep`` names a folder to keep."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from factories import make_artifact
from flyconfigs.schema import write_atomic

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_the_demo_removes_its_work_folder(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts" / "sm90"
    for m in (1024, 4096):
        artifact = make_artifact(key={"M": m, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"})
        write_atomic(artifacts / artifact.file_name(), artifact.to_json_bytes())
    (artifacts / "VERSION").write_text("1.0.0\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_")}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py"), "--artifacts", str(artifacts.parent)],
                          capture_output=True, text=True, env={**env, "TMPDIR": str(scratch)}, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "flyconfigs-sm90 1.0.0: 2 artifacts" in done.stdout and "work folder removed: " in done.stdout
    assert not [p.name for p in scratch.iterdir() if p.name.startswith("flyconfigs-demo-")]
