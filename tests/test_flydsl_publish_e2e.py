"""End to end with real parts: FlyDSL's RMSNorm tuned by FlyDSL's real ``Autotuner`` on
an MI300X (its device descriptor, timing and launch replaced: no GPU here), imported, and
published under a name of its own beside ``flyconfigs-gfx942`` built from
``artifacts/gfx942``; both are uploaded to a real pypiserver on loopback and pip-installed
into a fresh virtual environment, where each serves its own kernel: FlyDSL's RMSNorm
through :func:`flyconfigs.adapters.flydsl.serve` over FlyDSL's ``Autotuner`` (the
``flydsl`` wheel of this environment is made visible there, being too large to install
again; without torch, ``flydsl.autotune`` imports but ``flydsl.expr`` does not) and
flyconfigs' own ``rmsnorm`` through :func:`flyconfigs.resolve`."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("flydsl.autotune")

from flyconfigs.cli import main  # noqa: E402
from flyconfigs.publish.build import publish, upload_files  # noqa: E402
from test_flydsl_rmsnorm import BIG, MI300X, SMALL, WINNERS, on_device, tune_offline  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from local_index import LocalIndex, build_core_wheel, dependency_wheels, fresh_venv  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[1]

SERVE = """
import json, importlib, flyconfigs
from flyconfigs.adapters.flydsl import serve
autotune = importlib.import_module("flydsl.autotune")
from flydsl.autotune import Config
autotune._device_descriptor = lambda where=None: %r  # no GPU: FlyDSL's descriptor says MI300X

# The adopter's kernel parameters with plain annotations: flydsl.expr needs torch, which
# this environment lacks (tests/test_flydsl_rmsnorm.py runs it with FlyDSL's own types).
def rmsnorm_direct(Input, Gamma, Output, m_in: int, N: int, dtype_str: str, BLOCK_THREADS: int, stream=None):
    raise AssertionError("launched")

tuner = serve(autotune.autotune(configs=[Config(BLOCK_THREADS=128)], key=["m_in", "N", "dtype_str"],
                                default=lambda *a, **k: Config(BLOCK_THREADS=256), artifact_name="rmsnorm",
                                do_bench=lambda *a, **k: 1 / 0)(rmsnorm_direct))
out = {"flydsl": {}}
for m, n in %r:
    config = tuner.resolve_config(None, None, None, m, N=n, dtype_str="bf16", stream=None)
    out["flydsl"][str((m, n))] = [tuner.default.last.origin, config.to_dict()]
r = flyconfigs.resolve("rmsnorm", {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"},
                       "gfx942:304:AMD Instinct MI300X:sramecc+,xnack-")
out["rmsnorm"] = [r.source, r.origin, r.kernel]
print(json.dumps(out))
""" % (MI300X, [BIG, SMALL])


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIndex]:
    folder = tmp_path_factory.mktemp("index")
    dependency_wheels(folder)
    with LocalIndex(folder) as served:
        yield served


def _flydsl_visible(python: Path, tmp_path: Path) -> None:
    """Make this environment's ``flydsl`` (and only it) importable by ``python``."""
    spec = importlib.util.find_spec("flydsl")
    assert spec is not None and spec.origin is not None
    site = Path(spec.origin).parents[1]
    shelf = tmp_path / "flydsl-only"
    shelf.mkdir()
    for entry in site.glob("flydsl*"):
        (shelf / entry.name).symlink_to(entry)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "flydsl-only.pth").write_text(f"{shelf}\n")


def test_a_flydsl_tuning_published_under_its_own_name_installs_beside_the_official_package_and_both_serve(
        index: LocalIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWINE_USERNAME", "test")
    monkeypatch.setenv("TWINE_PASSWORD", "test")
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CACHE_DIR", str(tmp_path / "flydsl-cache"))
    on_device(monkeypatch, MI300X)
    dist = tmp_path / "dist"
    if not any(index.folder.glob("flyconfigs-[0-9]*.whl")):
        upload_files([build_core_wheel(ROOT, dist)], index.url)
    official_version = (ROOT / "artifacts" / "gfx942" / "VERSION").read_text().strip()
    publish(ROOT / "artifacts" / "gfx942", "gfx942", official_version, dist, upload=index.url)

    tune_offline(tmp_path / "offline", monkeypatch)
    assert main(["import", "flydsl", str(tmp_path / "offline"), "--out", str(tmp_path / "imported")]) == 0
    # The documented command, with its --name: never a second flyconfigs-gfx942.
    assert main(["publish", str(tmp_path / "imported"), "--name", "acme-flydsl-gfx942", "--target", "gfx942",
                 "--version", "1.0.0", "--out", str(dist), "--upload", index.url]) == 0

    python = fresh_venv(tmp_path / "venv")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--index-url", index.simple,
                    f"flyconfigs-gfx942=={official_version}", "acme-flydsl-gfx942"], check=True, capture_output=True)
    _flydsl_visible(python, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYCONFIGS_", "FLYDSL_")) and k != "PYTHONPATH"}
    env.update(FLYCONFIGS_NO_GPU_DETECT="1", FLYDSL_AUTOTUNE_CACHE_DIR=str(tmp_path / "cache2"))
    done = subprocess.run([str(python), "-c", SERVE], capture_output=True, text=True, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    served = json.loads(done.stdout.strip().splitlines()[-1])
    assert served["flydsl"] == {str(shape): ["acme-flydsl-gfx942", WINNERS[shape]] for shape in (BIG, SMALL)}
    assert served["rmsnorm"] == ["package", "flyconfigs-gfx942", "rmsnorm"]
    listed = subprocess.run([str(python), "-m", "flyconfigs", "list", "--json"], capture_output=True, text=True,
                            env=env, cwd="/")
    packages = {p["distribution"]: p for p in json.loads(listed.stdout)["packages"]}
    assert packages["acme-flydsl-gfx942"]["families"] == ["flydsl.rmsnorm"]
    assert packages["flyconfigs-gfx942"]["version"] == official_version
