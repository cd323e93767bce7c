"""A kernel package that is not part of flyconfigs, end to end with real parts: its wheel
declares a kernel through the ``flyconfigs.kernels`` entry point; installed with the
flyconfigs wheel from a local index into a fresh virtual environment, it is listed,
tuned there with ``flyconfigs tune`` (the test backend: no GPU here), refused for
publishing as test-double data, and served from a published data package built from its
FlyDSL offline configs.  Nothing in flyconfigs names this kernel."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flyconfigs.cli import main
from flyconfigs.publish.build import publish, upload_files

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from local_index import LocalIndex, build_core_wheel, dependency_wheels, fresh_venv  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[1]

DECLARATION = '''
"""acme_kernels: a softmax family declared for flyconfigs (a test's third-party package)."""
import hashlib
from flyconfigs.kernels.plugin import TunableKernel
from flyconfigs.registry import KeyAxis

TUNABLES = {"BLOCK": (64, 128, 256, 512), "num_warps": (1, 2, 4, 8), "online": (True, False)}


class SoftmaxSpec(TunableKernel):
    name = "acme_softmax"
    version = 3
    key_axes = (KeyAxis("rows", int, ordinal=True, minimum=1), KeyAxis("cols", int, minimum=1),
                KeyAxis("dtype", str, choices=("bf16", "fp16")), KeyAxis("causal", bool))
    tunables = TUNABLES
    presets = {"small": ("rows=1,4096 cols=1024 dtype=bf16 causal=true,false",)}
    # Its configs of versions 1 and 2 still run: FlyDSL files record no family version,
    # and flyconfigs flydsl import gives them version 1.
    compatible_versions = range(1, 3)

    def check_config(self, config, key, device):
        if config["BLOCK"] > key["cols"]:
            return "BLOCK wider than the row"
        return None

    def default_config(self, key, device):
        return {"BLOCK": 128, "num_warps": 4, "online": key["cols"] > 256}

    def space(self, key, device):
        out = [{"BLOCK": b, "num_warps": w, "online": o} for b in TUNABLES["BLOCK"] for w in (2, 4)
               for o in (True, False)]
        return [c for c in out if c["BLOCK"] <= key["cols"]]

    def traffic(self, key):
        return 4 * key["rows"] * key["cols"]

    def source_sha256(self):
        return hashlib.sha256(b"acme softmax 3").hexdigest()

    def workload(self, key, copies, backend):
        raise RuntimeError("acme_softmax runs only on a GPU")


SPEC = SoftmaxSpec()
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools>=70"]
build-backend = "setuptools.build_meta"

[project]
name = "acme-kernels"
version = "0.3.0"
requires-python = ">=3.10"
dependencies = ["flyconfigs"]

[project.entry-points."flyconfigs.kernels"]
acme_softmax = "acme_kernels:SPEC"

[tool.setuptools]
packages = ["acme_kernels"]
'''

MI300X = {"name": "AMD Instinct MI300X", "arch": "gfx942", "compute_units": 304}


def _flydsl_file(folder: Path, key: dict[str, object], config: dict[str, object]) -> None:
    """An offline config as FlyDSL's writer names and writes it."""
    identity = {"name": "acme_softmax", "key": key, "device": MI300X}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    text = json.dumps({"version": 1, "identity": identity, "config": config}, sort_keys=True, indent=2) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"acme_softmax-{digest}.json").write_text(text)


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_") and k != "PYTHONPATH"}
    env["FLYCONFIGS_NO_GPU_DETECT"] = "1"
    return subprocess.run([str(python), *args], capture_output=True, text=True, env=env, cwd=cwd)


def test_a_third_party_kernel_is_declared_tuned_published_and_served(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "acme"
    (source / "acme_kernels").mkdir(parents=True)
    (source / "acme_kernels" / "__init__.py").write_text(textwrap.dedent(DECLARATION))
    (source / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    dependency_wheels(index_dir)
    wheels = [build_core_wheel(ROOT, index_dir), build_core_wheel(source, index_dir)]
    assert any("acme_kernels" in w.name for w in wheels)

    monkeypatch.setenv("TWINE_USERNAME", "test")
    monkeypatch.setenv("TWINE_PASSWORD", "test")
    with LocalIndex(index_dir) as index:
        python = fresh_venv(tmp_path / "venv")
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--index-url", index.simple,
                        "acme-kernels"], check=True, capture_output=True)
        work = tmp_path / "work"
        work.mkdir()
        shown = _run(python, "-m", "flyconfigs", "show", "acme_softmax", "--json", cwd=work)
        assert shown.returncode == 0, shown.stderr
        assert "causal" in shown.stdout

        # Tuned by name with the kernel's own preset; the worker loads it by its entry point.
        tuned = _run(python, "-m", "flyconfigs", "tune", "acme_softmax", "--backend", "simulated", "--key-grid", "small",
                     "--out", "tuned", "--json", cwd=work)
        assert tuned.returncode == 0, tuned.stderr
        summary = json.loads(tuned.stdout)
        assert summary["tuned"] == 4
        artifacts = [json.loads((work / p).read_text()) for p in summary["artifacts"]]
        assert {a["kernel"]["name"] for a in artifacts} == {"acme_softmax"}
        assert {a["key"]["causal"] for a in artifacts} == {True, False}
        valid = _run(python, "-m", "flyconfigs", "validate", "tuned", cwd=work)
        assert valid.returncode == 1 and valid.stdout.count("test-double") == 4, valid.stdout + valid.stderr
        assert "0 valid, 4 invalid" in valid.stderr
        refused = _run(python, "-m", "flyconfigs", "publish", "tuned", "--target", "simulated", "--version", "1.0.0",
                       cwd=work)
        assert refused.returncode != 0 and "test" in refused.stderr.lower(), refused.stderr

        # Configs its FlyDSL tuner wrote on an MI300X, imported, published and served.
        flydsl = tmp_path / "flydsl"
        _flydsl_file(flydsl, {"rows": 4096, "cols": 1024, "dtype": "bf16", "causal": True},
                     {"BLOCK": 256, "num_warps": 8, "online": True})
        _flydsl_file(flydsl, {"rows": 4096, "cols": 1024, "dtype": "bf16", "causal": False},
                     {"BLOCK": 2048, "num_warps": 8, "online": True})  # the kernel refuses it: never served
        # FlyDSL's acme_softmax is this package's acme_softmax (else it would be flydsl.acme_softmax).
        assert main(["flydsl", "import", str(flydsl), "--out", str(tmp_path / "imported"),
                     "--kernel", "acme_softmax=acme_softmax"]) == 0
        result = publish(tmp_path / "imported", "gfx942", "1.0.0", tmp_path / "dist")
        upload_files(list(result.files), index.url)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--index-url", index.simple,
                        "flyconfigs-gfx942"], check=True, capture_output=True)
        resolve = textwrap.dedent('''
            import json, flyconfigs
            out = []
            for causal in (True, False):
                r = flyconfigs.resolve("acme_softmax", {"rows": 4096, "cols": 1024, "dtype": "bf16", "causal": causal},
                                       device="gfx942:304:AMD Instinct MI300X")
                out.append({"config": dict(r.config), "source": r.source, "origin": r.origin, "reasons": list(r.reasons)})
            print(json.dumps(out))
        ''')
        served = _run(python, "-c", resolve, cwd=work)
        assert served.returncode == 0, served.stderr
        causal, plain = json.loads(served.stdout)
        assert causal["source"] == "package" and causal["origin"] == "flyconfigs-gfx942"
        assert causal["config"] == {"BLOCK": 256, "num_warps": 8, "online": True}
        assert plain["source"] == "default" and plain["config"] == {"BLOCK": 128, "num_warps": 4, "online": True}
        assert any("BLOCK=2048 is not one of" in r for r in plain["reasons"]), plain["reasons"]
