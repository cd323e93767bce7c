"""A user who installed a data package but no GPU runtime is told so, once.

With only ``flyconfigs`` (pydantic and packaging) and ``flyconfigs-gfx942`` installed —
no hip-python, no cuda-bindings — the GPU cannot be detected and every call gets the
default heuristic.  ``resolve()`` says that once, at WARNING through ``logging``, with
the extra that brings the runtime (``flyconfigs[hip]`` for a gfx target).  The
environment is real: a fresh Python without site-packages that sees only the loader's
own dependencies, this checkout and the data package.  It is a warning, not a problem of
what is installed: ``flyconfigs doctor`` shows it and exits 0."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from conftest import SiteDir
from distributions import install_data_package
from factories import MI300X, make_artifact
from flyconfigs import resolve
from flyconfigs.errors import BackendUnavailableError, GPURuntimeMissingError
from flyconfigs.registry import Resolver, refresh

ROOT = Path(__file__).parents[1]
KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
LOADER_DEPENDENCIES = ("pydantic", "pydantic_core", "packaging", "typing_extensions", "annotated_types",
                       "typing_inspection")

CHILD = f"""
import logging
import flyconfigs
for m in (1, 2, 4096):
    r = flyconfigs.resolve("rmsnorm", {{**{KEY!r}, "M": m}})
    assert r.source == "default", r
print(r.reasons[0])
import sys
assert "hip" not in sys.modules and "cuda" not in sys.modules, "the runtime must really be absent"
"""
ADVICE = "no GPU runtime is installed; pip install 'flyconfigs[hip]' brings it (with ROCm)"


def _loader_only_site(root: Path) -> Path:
    """A folder with links to the loader's dependencies and flyconfigs' own metadata
    (its entry points), nothing else."""
    site = root / "loader-only"
    site.mkdir()
    for name in LOADER_DEPENDENCIES:
        module = __import__(name)
        source = Path(module.__file__)
        target = source.parent if source.name == "__init__.py" else source
        (site / target.name).symlink_to(target)
    own = metadata.distribution("flyconfigs")
    info = Path(str(own._path))  # type: ignore[attr-defined]  # the installed .dist-info folder
    (site / info.name).symlink_to(info)
    return site


def test_only_a_gfx_package_and_no_runtime_warns_once_naming_the_hip_extra(tmp_path: Path) -> None:
    packages = tmp_path / "packages"
    packages.mkdir()
    install_data_package(packages, "gfx942", [make_artifact(key=KEY, device=MI300X)])
    loader = _loader_only_site(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYCONFIGS_", "PYTHON"))}
    env["PYTHONPATH"] = os.pathsep.join([str(loader), str(ROOT), str(packages)])

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-S", *args], capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=120)

    result = run("-c", CHILD)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [f"the GPU is not detected and every call gets the default heuristic: {ADVICE}"]
    assert result.stdout.strip() == f"no device known: {ADVICE}"
    # doctor says it too, once, on its device line, and warns that no device is known
    # (nothing installed is at fault)
    doctor = run("-m", "flyconfigs", "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert f"device: unknown ({ADVICE})" in doctor.stdout
    assert (doctor.stdout + doctor.stderr).count("no GPU runtime") == 1, doctor.stdout + doctor.stderr
    assert "warning: no device known (see the device line)" in doctor.stdout


@pytest.mark.parametrize(("error", "warned"), [
    (GPURuntimeMissingError("the CUDA driver is not loadable"), True),
    (BackendUnavailableError("CUDA device 0 requested, 0 present"), False),
])
def test_only_a_missing_runtime_is_a_warning(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                                             error: Exception, warned: bool) -> None:
    monkeypatch.delenv("FLYCONFIGS_NO_GPU_DETECT")

    def detector() -> object:  # stands in for the GPU layer: this machine has no GPU to vary
        raise error

    resolver = Resolver(detector=detector)  # type: ignore[arg-type]
    first = resolver.resolve("rmsnorm", KEY)
    resolver.resolve("rmsnorm", {**KEY, "M": 8})
    warnings = [r.getMessage() for r in caplog.records if r.name == "flyconfigs.registry"]
    assert len(warnings) == int(warned)
    if warned:
        assert "no GPU runtime is installed; install the NVIDIA driver or ROCm (the CUDA driver" in warnings[0]
        assert first.reasons[0].startswith("no device known: no GPU runtime is installed; install")
    else:
        assert first.reasons[0] == "no device known: no GPU detected (BackendUnavailableError: CUDA device 0 requested, 0 present)"


def test_the_gpu_layer_itself_without_a_driver_warns_once_naming_the_runtime(
        site: SiteDir, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from flyconfigs.gpu import current_identity

    try:
        current_identity()
        pytest.skip("a GPU is present: its runtime is installed")
    except GPURuntimeMissingError as exc:
        missing = exc
    except BackendUnavailableError as exc:
        pytest.skip(f"a GPU runtime is installed but sees no device: {exc}")
    site.install("gfx942", [make_artifact(key=KEY, device=MI300X)])
    monkeypatch.delenv("FLYCONFIGS_NO_GPU_DETECT")
    refresh()
    caplog.set_level(logging.WARNING, logger="flyconfigs.registry")
    assert resolve("rmsnorm", KEY).source == "default"
    assert resolve("rmsnorm", {**KEY, "M": 8}).source == "default"
    assert len(caplog.records) == 1
    advice = ("pip install 'flyconfigs[hip]' brings it (with ROCm)" if "hip" in missing.extras
              else "install ROCm (no GPU backend is usable")
    assert f"every call gets the default heuristic: no GPU runtime is installed; {advice}" in caplog.records[0].getMessage()
