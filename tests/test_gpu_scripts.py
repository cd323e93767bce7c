"""The scripts that run this checkout on a GPU machine, checked on the CPU: the bundle
that carries the tree and the wheels there (size and contents), the release's resumable
steps (bookkeeping, with a stand-in python3 that records what it is asked), and
``scripts/gpu-tests.sh`` end to end (its GPU tests skip here, both runs happen)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_bundle  # noqa: E402


def _wheel(folder: Path, name: str) -> Path:
    path = folder / name
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("placeholder.txt", "x")
    return path


WHEELS = ("pydantic-2.14.4-py3-none-any.whl", "pydantic_core-2.50.5-cp312-cp312-manylinux_2_17_x86_64.whl",
          "typing_extensions-4.16.0-py3-none-any.whl", "annotated_types-0.8.0-py3-none-any.whl",
          "typing_inspection-0.4.5-py3-none-any.whl", "platformdirs-4.14.9-py3-none-any.whl",
          "tqdm-4.70.1-py3-none-any.whl")


def test_the_bundle_holds_the_tree_and_one_wheel_of_each_requirement_within_60_mib(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in WHEELS:
        _wheel(wheels, name)
    chosen = gpu_bundle.chosen_wheels(wheels)
    assert [w.name for w in chosen] == list(WHEELS)
    path = gpu_bundle.bundle(tmp_path / "out", chosen)
    assert path.stat().st_size <= 60 * 2**20
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
    assert {f".whl/{n}" for n in WHEELS} <= names
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    present = {n for n in tracked if (ROOT / n).is_file()}
    assert present <= names, sorted(present - names)[:5]
    for needed in ("pyproject.toml", "flyconfigs/__init__.py", "scripts/gpu-tests.sh", "bench/release_step.sh",
                   "tests/gpu/test_fused_add_rmsnorm_gpu.py", "artifacts/sm90/VERSION"):
        assert needed in names
    assert not [n for n in names if n.startswith((".venv/", ".git/", "build/"))]


def test_the_bundle_refuses_a_missing_or_doubled_wheel_and_an_oversize_tree(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in WHEELS[1:]:
        _wheel(wheels, name)
    with pytest.raises(gpu_bundle.BundleError, match="no wheel .* for pydantic$"):
        gpu_bundle.chosen_wheels(wheels)
    _wheel(wheels, WHEELS[0])
    _wheel(wheels, "tqdm-4.69.0-py3-none-any.whl")
    with pytest.raises(gpu_bundle.BundleError, match="more than one wheel .* for tqdm"):
        gpu_bundle.chosen_wheels(wheels)
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["git", "init", "-q", str(small)], check=True)
    (small / "big.bin").write_bytes(os.urandom(300_000))
    with pytest.raises(gpu_bundle.BundleError, match="MiB, over the"):
        gpu_bundle.bundle(tmp_path / "out", [], root=small, limit=100_000)
    assert list((tmp_path / "out").iterdir()) == []
    assert gpu_bundle.main([str(tmp_path / "out2"), "--wheels", str(tmp_path / "none")]) == 1


FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$FAKE_LOG"
[ -z "${FAKE_SLEEP:-}" ] || sleep "$FAKE_SLEEP"
exit "${FAKE_RC:-0}"
"""


def _step(out: Path, bin_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(out.parent / "calls"),
            **env}
    return subprocess.run(["bash", str(ROOT / "bench" / "release_step.sh"), str(out), *args], capture_output=True,
                          text=True, env=full, timeout=60)


def test_the_release_steps_skip_what_is_done_and_resume_what_ran_out(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    out = tmp_path / "rel"
    first = _step(out, bin_dir, "next")
    assert first.returncode == 0 and "gpu-tests-fused: done" in first.stdout, first.stdout + first.stderr
    # The next step runs past its budget: interrupted, not marked, exit 3.
    cut = _step(out, bin_dir, "next", FAKE_SLEEP="5", FLYCONFIGS_STEP_BUDGET_S="1")
    assert cut.returncode == 3 and "tune-rmsnorm-models: its 1 s ran out" in cut.stdout, cut.stdout + cut.stderr
    assert not (out / "steps" / "tune-rmsnorm-models.done").exists()
    again = _step(out, bin_dir, "next")
    assert again.returncode == 0 and "tune-rmsnorm-models: done" in again.stdout
    assert _step(out, bin_dir, "gpu-tests-fused").stdout.strip() == "gpu-tests-fused: done already"
    failed = _step(out, bin_dir, "launch-overhead", FAKE_RC="1")
    assert failed.returncode == 1 and not (out / "steps" / "launch-overhead.done").exists()
    assert _step(out, bin_dir, "banana").returncode == 2
    status = _step(out, bin_dir, "status").stdout.splitlines()
    assert status[:3] == ["done     gpu-tests-fused", "done     tune-rmsnorm-models", "not done tune-fused-models"]
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0].startswith("-m pytest tests/gpu/test_fused_add_rmsnorm_gpu.py")
    assert calls[1] == calls[2] and "--key-grid models --resume --out" in calls[1] and str(out / "tuned") in calls[1]
    for step in ("tune-fused-models", "tune-rmsnorm-offgrid", "tune-fused-offgrid", "launch-overhead", "off-grid-rmsnorm",
                 "off-grid-fused", "bench-fused-perf", "bench-fused-offgrid", "bench-rmsnorm-perf",
                 "bench-rmsnorm-models", "bench-rmsnorm-offgrid"):
        assert _step(out, bin_dir, "next").returncode == 0, step
        assert (out / "steps" / f"{step}.done").exists()
    assert _step(out, bin_dir, "next").returncode == 4


@pytest.mark.slow
def test_gpu_tests_script_publishes_every_folder_and_runs_both_ways(tmp_path: Path) -> None:
    """Without a GPU the GPU tests skip, but everything around them runs: flyconfigs
    installed into a fresh site, ``publish artifacts --all`` (the vLLM folders of target
    other than their name included), every wheel installed, both runs."""
    logs = tmp_path / "logs"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("FLYCONFIGS_PATH", None)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-tests.sh"), str(logs), "tests/gpu"], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=1500)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (logs / "summary.txt").read_text().strip() == "tests/gpu without the data packages: exit 0; with them: exit 0"
    folders = [p for p in (ROOT / "artifacts").iterdir() if p.is_dir()]
    assert (logs / "publish.txt").read_text().count("built ") == 2 * len(folders)  # a wheel and an sdist each
    listed = (logs / "packages.txt").read_text()
    assert listed.count("  flyconfigs-") == len(folders), listed
    assert "flyconfigs-sm90 " in listed and "flyconfigs-vllm-fused-moe-gfx1151 " in listed
