"""What another distribution installed never hangs or breaks flyconfigs: an
``entry_points.txt`` that is malformed, a FIFO, a link to ``/dev/zero`` or a huge file
is reported and skipped by the registry, and pydantic's plugin loader (which reads every
distribution's entry points when flyconfigs defines its models) neither fails the import
nor hangs it.  Each case runs in a fresh Python, as a user's process would, with real
distributions in a temporary site folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from distributions import install_data_package
from factories import make_artifact

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}

CHILD = """
import json, os
import flyconfigs
from flyconfigs.registry import default_resolver
r = flyconfigs.resolve("rmsnorm", {key!r}, "sm90:132:NVIDIA H200")
print(json.dumps({{
    "source": r.source,
    "problems": [str(p) for p in default_resolver().problems.problems()],
    "env": os.environ.get("PYDANTIC_DISABLE_PLUGINS"),
}}))
"""


def _other_distribution(root: Path, how: str) -> Path:
    """Install ``hostile 1.0`` whose ``entry_points.txt`` is broken ``how``; returns it."""
    info = root / "hostile-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile\nVersion: 1.0\n")
    entry_points = info / "entry_points.txt"
    if how == "malformed":
        entry_points.write_text("[console_scripts]\nno equals sign here\n")
    elif how == "fifo":
        os.mkfifo(entry_points)
    elif how == "dev-zero":
        entry_points.symlink_to("/dev/zero")
    else:  # a sparse file of 2 GiB: no disk used, but read whole it would take the memory
        with open(entry_points, "wb") as handle:
            handle.truncate(2 << 30)
    return info


def _run(site: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "FLYCONFIGS_NO_GPU_DETECT": "1"}
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=site.parent, timeout=120)


@pytest.mark.parametrize("how", ["malformed", "fifo", "dev-zero", "huge"])
def test_a_fresh_process_imports_and_serves_whatever_else_is_installed(tmp_path: Path, how: str) -> None:
    import json

    site = tmp_path / "site"
    site.mkdir()
    install_data_package(site, "sm90", [make_artifact(key=KEY)])
    info = _other_distribution(site, how)
    result = _run(site, CHILD.format(key=KEY))
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["source"] == "package"
    assert any(p.startswith(f"bad-distribution: {info}: skipped") for p in out["problems"]), out["problems"]
    assert f"pydantic plugins are not loaded in this process: {info}: " in result.stderr
    assert out["env"] is None  # the process environment is left as it was


PLUGIN = '''
from pathlib import Path


class Recorder:
    def new_schema_validator(self, schema, schema_type, schema_type_path, schema_kind, config, plugin_settings):
        with open(Path(__file__).with_name("seen.txt"), "a") as handle:
            handle.write(schema_type_path.module + "\\n")
        return None, None, None


plugin = Recorder()
'''


def test_with_every_distribution_readable_pydantic_plugins_load_as_usual(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    info = site / "recorder-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: recorder\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nrecorder = recorder_plugin:plugin\n")
    (site / "recorder_plugin.py").write_text(textwrap.dedent(PLUGIN))
    # An old single-file .egg-info, as distutils and system packages install it, is readable.
    (site / "oldstyle-1.0.egg-info").write_text("Metadata-Version: 1.1\nName: oldstyle\nVersion: 1.0\n")
    result = _run(site, "import flyconfigs.schema")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "flyconfigs.schema.models" in (site / "seen.txt").read_text().split()


def test_a_metadata_file_that_is_a_fifo_is_skipped_not_waited_for(tmp_path: Path) -> None:
    import json

    site = tmp_path / "site"
    site.mkdir()
    install_data_package(site, "sm90", [make_artifact(key=KEY)])
    info = site / "hostile-1.0.dist-info"
    info.mkdir()
    os.mkfifo(info / "METADATA")
    (info / "entry_points.txt").write_text("[flyconfigs.artifacts]\nsm90 = hostile_data\n")
    result = _run(site, CHILD.format(key=KEY))
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["source"] == "package"
    assert f"bad-distribution: {info}: skipped: METADATA cannot be read: not a regular file" in out["problems"]
    assert "pydantic" not in result.stderr  # pydantic reads no METADATA: its plugins load as usual
