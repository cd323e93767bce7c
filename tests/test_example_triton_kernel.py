"""The example third-party Triton kernel (``examples/acme-silu-mul``) end to end with real
parts: its wheel and flyconfigs' are served by a local index (pypiserver on 127.0.0.1)
and installed into a fresh virtual environment (no torch, no Triton: the declaration
needs neither), where it is shown and tuned with the test backend (no GPU here), whose
artifacts validate refuses as a test double's; its tunings are published under its own
distribution name and installed beside ``flyconfigs-sm90`` (built from real artifacts of
``artifacts/sm90``), and one process serves both through entry points.

The test backend's artifacts are refused by ``publish``, so this test — and only this
test — relabels them as measured on the H200 of a real sm90 artifact before publishing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flyconfigs.cli import main
from flyconfigs.publish.build import publish, upload_files
from flyconfigs.schema import write_atomic
from flyconfigs.schema.pack import folder_artifacts

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from local_index import LocalIndex, build_core_wheel, dependency_wheels, fresh_venv  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[1]
EXAMPLE = ROOT / "examples" / "acme-silu-mul"
H200 = "sm90:132:NVIDIA H200"


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_") and k != "PYTHONPATH"}
    env["FLYCONFIGS_NO_GPU_DETECT"] = "1"
    return subprocess.run([str(python), *args], capture_output=True, text=True, env=env, cwd=cwd)


def _relabel(tuned: Path, out: Path, real: dict[str, object]) -> None:
    """The test backend's artifacts as if measured on ``real``'s device (test-only)."""
    out.mkdir()
    for path in sorted(tuned.glob("*.json")):
        data = json.loads(path.read_text())
        data["device"] = real["device"]
        data["provenance"]["backend"] = "cuda"
        data["provenance"]["backend_versions"] = real["provenance"]["backend_versions"]  # type: ignore[index]
        (out / path.name).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _publish_supports_name() -> bool:
    shown = subprocess.run([sys.executable, "-m", "flyconfigs", "publish", "--help"], capture_output=True, text=True)
    return "--name" in shown.stdout


def test_the_example_is_tuned_published_under_its_own_name_and_served_beside_the_official_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not _publish_supports_name():
        pytest.skip("flyconfigs publish has no --name here: a package under the author's own name cannot be built")
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    dependency_wheels(index_dir)
    source = tmp_path / "acme-silu-mul"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    wheels = [build_core_wheel(ROOT, index_dir), build_core_wheel(source, index_dir)]
    assert any(w.name.startswith("acme_silu_mul-0.1.0") for w in wheels)

    monkeypatch.setenv("TWINE_USERNAME", "test")
    monkeypatch.setenv("TWINE_PASSWORD", "test")
    with LocalIndex(index_dir) as index:
        python = fresh_venv(tmp_path / "venv")
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--index-url", index.simple,
                        "acme-silu-mul"], check=True, capture_output=True)
        work = tmp_path / "work"
        work.mkdir()
        shown = _run(python, "-m", "flyconfigs", "show", "acme_silu_mul", "--json", cwd=work)
        assert shown.returncode == 0, shown.stderr
        assert [a["name"] for a in json.loads(shown.stdout)["axes"]] == ["M", "N", "dtype"]

        tuned = _run(python, "-m", "flyconfigs", "tune", "acme_silu_mul", "--backend", "simulated", "--key-grid", "small",
                     "--out", "tuned", "--json", cwd=work)
        assert tuned.returncode == 0, tuned.stderr
        assert json.loads(tuned.stdout)["tuned"] == 4
        refused = _run(python, "-m", "flyconfigs", "validate", "tuned", cwd=work)
        assert refused.returncode == 1 and refused.stdout.count("test-double") == 4, refused.stdout + refused.stderr

        official = []
        (tmp_path / "picked").mkdir()
        for artifact in folder_artifacts(ROOT / "artifacts" / "sm90", "rmsnorm")[:3]:
            official.append(write_atomic(tmp_path / "picked" / artifact.file_name(), artifact.to_json_bytes()))
        real = json.loads(official[0].read_text())
        _relabel(work / "tuned", work / "relabelled", real)
        valid = _run(python, "-m", "flyconfigs", "validate", "relabelled", cwd=work)
        assert valid.returncode == 0, valid.stdout + valid.stderr
        assert main(["publish", str(work / "relabelled"), "--name", "acme-silu-mul-sm90", "--target", "sm90",
                     "--version", "1.0.0", "--out", str(tmp_path / "dist-acme"), "--upload", index.url]) == 0
        subset = tmp_path / "official"
        subset.mkdir()
        for path in official:
            shutil.copy2(path, subset / path.name)
        upload_files(list(publish(subset, "sm90", "2026.12.99", tmp_path / "dist-official").files), index.url)

        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--index-url", index.simple,
                        "acme-silu-mul-sm90", "flyconfigs-sm90"], check=True, capture_output=True)
        winners = {json.dumps(json.loads(p.read_text())["key"], sort_keys=True): json.loads(p.read_text())["winner"]["config"]
                   for p in (work / "relabelled").glob("*.json")}
        resolve = textwrap.dedent(f'''
            import json, flyconfigs
            acme = flyconfigs.resolve("acme_silu_mul", {{"M": 4096, "N": 8192, "dtype": "bf16"}}, device="{H200}")
            norm = flyconfigs.resolve("rmsnorm", {json.dumps(real["key"])}, device="{H200}")
            print(json.dumps([{{"config": dict(r.config), "source": r.source, "origin": r.origin}} for r in (acme, norm)]))
        ''')
        served = _run(python, "-c", resolve, cwd=work)
        assert served.returncode == 0, served.stderr
        acme, norm = json.loads(served.stdout)
        assert acme["source"] == "package" and acme["origin"] == "acme-silu-mul-sm90"
        assert acme["config"] == winners[json.dumps({"M": 4096, "N": 8192, "dtype": "bf16"}, sort_keys=True)]
        assert norm["source"] == "package" and norm["origin"] == "flyconfigs-sm90"
        assert norm["config"] == real["winner"]["config"]  # type: ignore[index]
