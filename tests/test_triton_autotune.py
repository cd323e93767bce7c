"""The drop-in for ``triton.autotune``: a third party's kernel (a real distribution with
a ``flyconfigs.kernels`` entry point) serves the registry's config for its key with no
search, falls back to Triton's own autotune or to its default as its author chose, and
``flyconfigs tune`` searches exactly its configs and writes artifacts it then serves.
Run on the CPU with Triton's interpreter (``TRITON_INTERPRET=1``); Triton's search times
on the host there, through its own ``do_bench`` argument, as the interpreter has no
device timer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from triton_interpreter import use_interpreter

use_interpreter()

import torch  # noqa: E402

import triton_softmax_package as package  # noqa: E402
from flyconfigs.kernels.plugin import TunableKernel  # noqa: E402
from flyconfigs.kernels.triton_autotune import autotune  # noqa: E402
from flyconfigs.registry import KernelDecl, default_resolver, unregister_kernel  # noqa: E402
from flyconfigs.schema import Artifact  # noqa: E402
from flyconfigs.tuner.simulated import SIMULATED_DEVICE  # noqa: E402

H200 = "sm90:132:NVIDIA H200"
KEY = {"n_rows": 4, "n_cols": 100, "dtype": "fp32"}


@pytest.fixture(autouse=True)
def _forget_the_family() -> Any:
    yield
    unregister_kernel(package.FAMILY)
    os.environ.pop("ACME_FALLBACK", None)


def _artifact(winner: dict[str, Any], configs: list[dict[str, Any]], key: dict[str, Any] = KEY) -> Artifact:
    # Tuned with the source the test loaded: the family binds artifacts to its exact source.
    family = sys.modules[package.MODULE].softmax_kernel.family
    return package.artifact(configs, winner, key, source_sha256=family.source_sha256())


def _run(module: Any, x: torch.Tensor) -> torch.Tensor:
    y = module.softmax(x)
    atol = 1e-6 if x.dtype == torch.float32 else 1e-3
    assert torch.allclose(y.double(), torch.softmax(x.double(), dim=-1), atol=atol), "wrong softmax"
    return y


def test_the_decorated_kernel_declares_a_tunable_family_of_exactly_its_configs(site: Any) -> None:
    package.install(site.root)
    module: Any = package.load(site.root)
    family = module.softmax_kernel.family
    assert isinstance(family, KernelDecl) and isinstance(family, TunableKernel)
    assert [a.name for a in family.key_axes] == ["n_rows", "n_cols", "dtype"]
    configs = [{"BLOCK": b, "num_warps": w, "num_stages": 3} for b, w in ((32, 1), (64, 2), (128, 4))]
    assert family.space(KEY) == configs
    assert family.default_config(KEY, None) == configs[1]
    assert family.tunables == {"BLOCK": (32, 64, 128), "num_warps": (1, 2, 4), "num_stages": (3,)}
    assert family.check_config({"BLOCK": 64, "num_warps": 4, "num_stages": 3}, KEY, None) is not None
    assert family.check_config({"BLOCK": 64.0, "num_warps": 2, "num_stages": 3}, KEY, None) is not None
    assert family.check_config(configs[2], KEY, None) is None
    assert family.build(configs[0], KEY, None) is None
    assert family.tool_versions()["triton"]
    assert family.traffic(KEY) == 2 * 4 * 100 * 4  # X read, Y written


def test_an_artifact_for_the_key_serves_its_config_with_no_search(site: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    package.install(site.root)
    module: Any = package.load(site.root)
    configs = module.softmax_kernel.family.configs
    site.install("sm90", [_artifact(configs[2], configs)])
    monkeypatch.setenv("FLYCONFIGS_DEVICE", H200)
    _run(module, torch.randn(4, 100))
    kernel = module.softmax_kernel
    assert kernel.resolution.source == "package" and kernel.resolution.origin == "flyconfigs-sm90"
    assert kernel.best_config is module.CONFIGS[2]
    assert module.BENCHED == [] and kernel.searches == 0
    # A nearby size is served the same config (n_rows and n_cols are ordinal axes) ...
    _run(module, torch.randn(3, 100))
    assert kernel.resolution.key_match == "nearest" and kernel.best_config is module.CONFIGS[2]
    assert module.BENCHED == [] and kernel.searches == 0
    # ... another dtype never is (an exact axis): Triton searches it, once.
    _run(module, torch.randn(4, 100).half())
    assert kernel.resolution.source == "default" and kernel.searches == 1 and len(module.BENCHED) == 3


def test_without_an_artifact_triton_autotunes_once_per_key(site: Any) -> None:
    package.install(site.root)
    module: Any = package.load(site.root)
    x = torch.randn(4, 100)
    _run(module, x)
    _run(module, x)
    kernel = module.softmax_kernel
    assert kernel.resolution.source == "default"
    assert kernel.searches == 1 and len(module.BENCHED) == 3, "every config timed once, for one key"
    assert kernel.best_config in module.CONFIGS


def test_fallback_default_runs_the_declared_default_without_a_search(site: Any) -> None:
    package.install(site.root)
    module: Any = package.load(site.root, fallback="default")
    _run(module, torch.randn(4, 100, dtype=torch.float16).float())
    kernel = module.softmax_kernel
    assert kernel.best_config is module.CONFIGS[1]
    assert module.BENCHED == [] and kernel.searches == 0


def test_an_artifact_whose_winner_is_not_one_of_the_configs_is_refused(site: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    package.install(site.root)
    module: Any = package.load(site.root, fallback="default")
    configs = [*module.softmax_kernel.family.configs, {"BLOCK": 256, "num_warps": 8, "num_stages": 3}]
    site.install("sm90", [_artifact(configs[3], configs)])
    monkeypatch.setenv("FLYCONFIGS_DEVICE", H200)
    _run(module, torch.randn(4, 100))
    kernel = module.softmax_kernel
    assert kernel.resolution.source == "default" and kernel.best_config is module.CONFIGS[1]
    # Refused by the registry's check of the declared tunables, before the family's own.
    assert any("BLOCK=256 is not one of 32, 64, 128" in r for r in kernel.resolution.reasons), kernel.resolution.reasons


def test_a_key_the_registry_cannot_take_falls_back_and_warns_once(site: Any, caplog: pytest.LogCaptureFixture) -> None:
    package.install(site.root)
    module: Any = package.load(site.root, fallback="default")
    x = torch.randn(2, 40)
    y = torch.empty_like(x)
    for _ in range(2):
        # A float size is not a key value of an int axis (Triton's own key takes anything).
        module.softmax_kernel[(2,)](y, x, x.stride(0), 2.0, 40)
    assert module.softmax_kernel.resolution is None
    assert module.softmax_kernel.best_config is module.CONFIGS[1]
    warned = [r for r in caplog.records if "acme_row_softmax" in r.getMessage()]
    assert len(warned) == 1 and "n_rows" in warned[0].getMessage()


def test_the_workload_checks_every_config_with_the_interpreter(site: Any) -> None:
    package.install(site.root)
    module: Any = package.load(site.root)
    family = module.softmax_kernel.family
    work = family.workload(KEY, 3, None, device="cpu")
    assert work.copies == 3
    assert not torch.equal(work.args[0]["X"], work.args[1]["X"]), "rotated copies hold different inputs"
    for config in family.configs:
        assert work.check(config) is None
        assert work.resources(config) is None  # the interpreter compiles nothing
    work.launcher(family.configs[0])(2)
    assert torch.allclose(work.args[2]["Y"].double(), torch.softmax(work.args[2]["X"].double(), -1), atol=1e-6)


@pytest.mark.slow  # flyconfigs tune in a subprocess, its worker importing torch and Triton
def test_tune_searches_exactly_the_configs_and_the_decorator_serves_what_it_wrote(
        site: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package.install(site.root)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site.root), *sys.path]), "TRITON_INTERPRET": "1"}
    tuned = subprocess.run([sys.executable, "-m", "flyconfigs", "tune", package.FAMILY, "--backend", "simulated",
                            "--key-grid", "n_rows=4 n_cols=100 dtype=fp32", "--out", str(tmp_path / "tuned"), "--json"],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    summary = json.loads(tuned.stdout)
    assert summary["tuned"] == 1
    artifact = json.loads(Path(summary["artifacts"][0]).read_text())
    module: Any = package.load(site.root, fallback="default")
    family = module.softmax_kernel.family
    assert sorted(json.dumps(c["config"], sort_keys=True) for c in artifact["candidates"]) == sorted(
        json.dumps(c, sort_keys=True) for c in family.configs)
    assert artifact["kernel"]["source_sha256"] == family.source_sha256()
    assert artifact["provenance"]["backend_versions"]["triton"]

    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path / "tuned"))
    monkeypatch.setenv("FLYCONFIGS_DEVICE", json.dumps({k: SIMULATED_DEVICE[k] for k in ("vendor", "arch", "product",
                                                                                          "compute_units")}))
    default_resolver().refresh()
    _run(module, torch.randn(4, 100))
    kernel = module.softmax_kernel
    assert kernel.resolution.source == "override", kernel.resolution.reasons
    assert family.index_of(artifact["winner"]["config"]) == module.CONFIGS.index(kernel.best_config)
    assert module.BENCHED == []


def test_the_decorator_refuses_what_it_cannot_serve() -> None:
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(X, n, BLOCK: tl.constexpr):
        pass

    configs = [triton.Config({"BLOCK": 16})]
    with pytest.raises(ValueError, match="fallback must be one of triton, default"):
        autotune("k", configs, ["n"], fallback="search")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not arguments of the kernel"):
        autotune("k", configs, ["m"])(kernel)
    with pytest.raises(ValueError, match="default= must be one of the configs"):
        autotune("k", configs, ["n"], default=triton.Config({"BLOCK": 32}))(kernel)
    with pytest.raises(ValueError, match="non-empty list of triton.Config"):
        autotune("k", [{"BLOCK": 16}], ["n"])
    with pytest.raises(ValueError, match=r"configs\[0\] has values an artifact cannot hold .*'BLOCK': \[16\]"):
        autotune("k", [triton.Config({"BLOCK": [16]})], ["n"])
    with pytest.raises(ValueError, match="family must be a kernel name"):
        autotune("a/b", configs, ["n"])
    unregister_kernel("k")


def test_importing_the_helpers_imports_neither_torch_nor_triton() -> None:
    code = ("import sys, flyconfigs.kernels.triton_autotune, flyconfigs.kernels.triton_family; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'triton', 'numpy'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("fallback", ["triton", "default"])
def test_warmup_compiles_without_running_or_searching(site: Any, fallback: str) -> None:
    package.install(site.root)
    module: Any = package.load(site.root, fallback=fallback)
    x = torch.randn(4, 100)
    y = torch.full_like(x, float("nan"))
    module.softmax_kernel.warmup(y, x, x.stride(0), 4, 100, grid=(4,))
    assert torch.isnan(y).all(), "a warmup runs nothing"
    assert module.BENCHED == [] and module.softmax_kernel.searches == 0
    assert module.softmax_kernel.configs == module.CONFIGS and module.softmax_kernel.keys == ["n_rows", "n_cols"]


@pytest.mark.slow
def test_the_tuners_parent_sizes_a_call_without_importing_torch(tmp_path: Path) -> None:
    """A decorated kernel whose module imports no torch: ``traffic`` makes the call's
    arguments on the meta device in a child process, and this one never imports torch."""
    (tmp_path / "acme_sized.py").write_text(
        "import triton\nimport triton.language as tl\n"
        "from flyconfigs.kernels.triton_autotune import autotune\n\n\n"
        "def inputs(key, device):\n    import torch\n\n"
        "    x = torch.empty(key['n'], device=device, dtype=torch.float32)\n"
        "    return {'Y': torch.empty_like(x), 'X': x, 'n': key['n']}\n\n\n"
        "@autotune(family='acme_sized', configs=[triton.Config({'BLOCK': 16})], key=['n'], inputs=inputs)\n"
        "@triton.jit\ndef kernel(Y, X, n, BLOCK: tl.constexpr):\n    pass\n")
    code = ("import sys, acme_sized; sized = acme_sized.kernel.family.traffic({'n': 100}); "
            "assert 'torch' not in sys.modules, 'the parent imported torch'; print(sized)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(2 * 100 * 4)]  # X read, Y written: every argument inputs makes, once
