"""The worked example that opens docs/plugins.md (``examples/acme-layernorm``): the code
the page shows is the example's; its declaration (32 lines, no torch, no Triton) has a
default that sees the device, a rule, an adapt hook and three outputs, every one
checked; on the CPU its kernel runs under Triton's interpreter and its op serves the
default; a nearby key's winner too narrow for the asked row is widened by ``adapt``; and
the page's CPU block runs as written (slow: the example is installed, the tuner runs its
simulated backend, ``validate`` and ``publish`` refuse the output, ``explain`` says why
the folder serves nothing).  The GPU half is ``examples/acme-layernorm/gpu-end-to-end.sh``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from triton_interpreter import use_interpreter

use_interpreter()

import torch  # noqa: E402

from factories import artifact_dict  # noqa: E402
from flyconfigs.registry import Resolver, register_kernel  # noqa: E402
from flyconfigs.registry.declarations import unregister_kernel  # noqa: E402
from flyconfigs.registry.sources.device import parse_device_spec  # noqa: E402

ROOT = Path(__file__).parents[1]
EXAMPLE = ROOT / "examples" / "acme-layernorm"
PAGE = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
sys.path.insert(0, str(EXAMPLE))

from acme_layernorm import SPEC  # noqa: E402
from acme_layernorm.kernel import layer_norm, reference  # noqa: E402

KEY = {"M": 5, "N": 1000, "dtype": "bf16"}


@pytest.fixture
def declared() -> Iterator[None]:
    register_kernel(SPEC)
    yield
    unregister_kernel(SPEC.name)


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE, re.S)


def test_the_page_opens_with_the_example_and_shows_its_code_as_it_is() -> None:
    first_section = PAGE.split("\n## ", 2)[1]
    assert first_section.startswith("A worked example")
    declaration = (EXAMPLE / "acme_layernorm" / "__init__.py").read_text(encoding="utf-8")
    kernel = (EXAMPLE / "acme_layernorm" / "kernel.py").read_text(encoding="utf-8")
    assert _blocks("python")[:2] == [declaration, kernel]
    assert len(declaration.splitlines()) <= 40
    assert 'acme_layernorm = "acme_layernorm:SPEC"' in (EXAMPLE / "pyproject.toml").read_text(encoding="utf-8")


def test_the_declaration_needs_neither_torch_nor_triton() -> None:
    code = ("import sys, acme_layernorm as a; s = a.SPEC; s.source_sha256(); s.space({'M': 4, 'N': 8192, "
            "'dtype': 'bf16'}); s.default_config({'M': 4, 'N': 8192, 'dtype': 'bf16'}, None); "
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules, sorted(sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLE), *sys.path])})
    assert done.returncode == 0, done.stderr


def test_every_output_is_checked() -> None:
    work = SPEC.workload(KEY, 2, None, device="cpu")
    assert sorted(work.args[0]) == ["inputs", "out0", "out1", "out2"]
    assert work.check({"BLOCK_N": 1024, "num_warps": 4}) is None
    assert work.check({"BLOCK_N": 16384, "num_warps": 16}) is None

    def forgets_the_mean(config: Any, x: Any, w: Any, b: Any, y: Any, mean: Any, rstd: Any) -> Any:
        from acme_layernorm.kernel import launch

        return launch(config, x, w, b, y, torch.empty_like(mean), rstd)

    from dataclasses import replace

    broken = replace(SPEC, launch=forgets_the_mean).workload(KEY, 1, None, device="cpu")
    assert broken.check({"BLOCK_N": 1024, "num_warps": 4}) == "out1: 5 outputs unwritten or NaN"


def test_the_op_runs_on_the_cpu_with_the_default(declared: None) -> None:
    x, w, b = torch.randn(3, 700), torch.randn(700), torch.randn(700)
    outs = layer_norm(x, w, b)
    for out, expected in zip(outs, reference(x, w, b), strict=True):
        assert torch.allclose(out.double(), expected, atol=1e-4, rtol=1e-4)
    from acme_layernorm.kernel import CONFIGS

    launch = CONFIGS({"M": 3, "N": 700, "dtype": "fp32"}, x.device)
    assert launch.resolution.source == "default" and dict(launch.config) == {"BLOCK_N": 1024, "num_warps": 4}
    assert "on the CPU" in launch.resolution.reasons[0]


def test_the_default_sees_the_device(declared: None) -> None:
    resolver = Resolver(paths=[], detector=None)
    key = {"M": 4096, "N": 8192, "dtype": "bf16"}
    assert dict(resolver.resolve("acme_layernorm", key, "H100").config) == {"BLOCK_N": 8192, "num_warps": 16}
    assert dict(resolver.resolve("acme_layernorm", key, "MI300X").config) == {"BLOCK_N": 8192, "num_warps": 8}
    assert SPEC.default_config(key, None) == {"BLOCK_N": 8192, "num_warps": 16}


def test_a_nearby_winner_too_narrow_for_the_row_is_widened(declared: None, tmp_path: Path) -> None:
    h100 = parse_device_spec("H100")
    data = artifact_dict(kernel="acme_layernorm", key={"M": 4096, "N": 8192, "dtype": "bf16"}, n_candidates=2)
    device = json.loads((ROOT / "tests" / "corpus" / "good" / "h200-rmsnorm.json").read_text())["device"]
    data["device"] = {**device, "product": h100.product, "compute_units": h100.compute_units}
    data["kernel"]["source_sha256"] = SPEC.source_sha256()
    winner, other = {"BLOCK_N": 8192, "num_warps": 8}, {"BLOCK_N": 16384, "num_warps": 16}
    data["candidates"][0]["config"], data["candidates"][1]["config"] = winner, other
    data["winner"]["config"], data["default"]["config"] = winner, other
    (tmp_path / "acme_layernorm-sm90.json").write_text(json.dumps(data))
    resolver = Resolver(paths=[str(tmp_path)], detector=None)
    exact = resolver.resolve("acme_layernorm", {"M": 4096, "N": 8192, "dtype": "bf16"}, "H100")
    assert exact.source == "override" and dict(exact.config) == winner, exact.reasons
    wider = resolver.resolve("acme_layernorm", {"M": 4096, "N": 10240, "dtype": "bf16"}, "H100")
    assert wider.key_match == "nearest" and dict(wider.config) == {"BLOCK_N": 16384, "num_warps": 8}, wider.reasons
    assert wider.adapted_from is not None and dict(wider.adapted_from) == winner


def _cpu_block() -> list[str]:
    block = PAGE.split("### On a CPU", 1)[1]
    return [line for line in re.findall(r"```sh\n(.*?)```", block, re.S)[0].splitlines() if line]


@pytest.mark.slow
def test_the_pages_cpu_block_runs_as_written(tmp_path: Path) -> None:
    """The pip line is run as ``pip install --target`` (this test has no index and must
    not change its own environment); every other line as the page writes it, in a
    shell, with the example on ``PYTHONPATH``.  A line whose comment says ``exit 1``
    must fail so; every other must succeed."""
    site = tmp_path / "site"
    lines = _cpu_block()
    assert lines[0].startswith("pip install ")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(EXAMPLE)], check=True, capture_output=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, module in (("flyconfigs", "flyconfigs"), ("python", None)):
        target = bin_dir / name
        target.write_text(f"#!/bin/sh\nexec {sys.executable} {'-m ' + module if module else ''} \"$@\"\n")
        target.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", FLYCONFIGS_NO_GPU_DETECT="1",
               PYTHONPATH=os.pathsep.join([str(site), *sys.path]))
    outputs = []
    for line in lines[1:]:
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        expected = 1 if "# exit 1" in line else 0
        assert done.returncode == expected, f"{line}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout + done.stderr)
    shown, tuned, refused, unpublished, explained, served = outputs
    refused = refused.split("\n0 valid")[0]  # the files as validate lists them, before its summary
    assert "acme_layernorm" in shown and "BLOCK_N" not in shown.split("key:")[0]
    assert "tuned 4 keys" in tuned and "torch" not in tuned
    assert refused.count("provenance.backend: test-double: made by the test backend") == 4, refused
    assert "made by a test double" in unpublished and not (tmp_path / "dist").exists()
    assert "none (4 files of FLYCONFIGS_PATH skipped: 4 for simulated (made by the test backend" in explained
    assert "BLOCK_N=8192 num_warps=16  [default;" in explained
    assert served.strip() == "[(4, 1000), (4,), (4,)]"
