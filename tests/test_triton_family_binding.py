"""What a TritonFamily computes in the light processes, without running the kernel's
code: the source digest of a module inside a package whose ``__init__`` must not run
(a third-party library that imports torch there), or of a distribution's version; the
bytes a call moves, sized in a child process so that the tuner's parent never imports
torch; and the compile cost that orders the space, so that ``--budget`` keeps the
cheapest configs and a costly block is warned about once."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from factories import H200
from flyconfigs.errors import TuneError
from flyconfigs.kernels.triton_family import TritonFamily, elements_per_thread
from flyconfigs.kernels.triton_source import module_file
from flyconfigs.schema.models import Device
from flyconfigs.tuner.key import candidate_configs

ROOT = Path(__file__).parents[1]
KEY = {"M": 4, "N": 1000, "dtype": "bf16"}


def _family(**changes: object) -> TritonFamily:
    fields: dict[str, object] = {"name": "bound", "configs": {"BLOCK_N": (1024, 32768), "num_warps": (1, 8)},
                                 "default": {"BLOCK_N": 1024, "num_warps": 8}, "launch": "bound_kernels.ops:launch",
                                 "reference": "bound_kernels.ops:reference", **changes}
    return TritonFamily(**fields)  # type: ignore[arg-type]


@pytest.fixture
def library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package whose ``__init__`` fails if run (as importing torch would be, here)."""
    package = tmp_path / "bound_kernels"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('bound_kernels/__init__ ran: it imports torch')\n")
    (package / "ops.py").write_text("def launch(config, x, out):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    for name in [m for m in sys.modules if m.startswith("bound_kernels")]:
        del sys.modules[name]


def test_a_module_inside_a_package_is_digested_without_running_the_package(library: Path) -> None:
    family = _family(source="bound_kernels.ops")
    expected = hashlib.sha256((library / "ops.py").read_bytes()).hexdigest()
    assert family.source_sha256() == expected
    assert _family().source_sha256() == expected  # launch's module, the default
    assert "bound_kernels" not in sys.modules
    assert module_file("bound_kernels.ops", "x") == str(library / "ops.py")
    with pytest.raises(TuneError, match="'bound_kernels.nothing' cannot be found"):
        _family(source="bound_kernels.nothing").source_sha256()


def test_a_family_may_bind_to_a_distributions_version() -> None:
    family = _family(source_distribution="packaging")
    version = metadata.version("packaging")
    assert family.source_sha256() == hashlib.sha256(f"packaging=={version}".encode()).hexdigest()
    with pytest.raises(TuneError, match="'no-such-dist' is not installed"):
        _family(source_distribution="no-such-dist").source_sha256()
    with pytest.raises(TypeError, match="not both"):
        _family(source="bound_kernels.ops", source_distribution="packaging")


def test_the_space_is_ordered_by_compile_cost_and_a_costly_block_is_warned_once(
        caplog: pytest.LogCaptureFixture) -> None:
    family = _family(rules=None)
    assert elements_per_thread({"BLOCK_N": 32768, "num_warps": 1}) == 1024
    with caplog.at_level(logging.WARNING, logger="flyconfigs.kernels"):
        space = family.space(KEY)
        family.space({**KEY, "M": 8})
    assert space == [{"BLOCK_N": 1024, "num_warps": 8}, {"BLOCK_N": 1024, "num_warps": 1},
                     {"BLOCK_N": 32768, "num_warps": 8}, {"BLOCK_N": 32768, "num_warps": 1}]
    warned = [r.getMessage() for r in caplog.records if r.name == "flyconfigs.kernels"]
    assert len(warned) == 1 and "1 configs hold more than 512 block elements per thread (BLOCK_N=32768 num_warps=1)" \
        in warned[0]
    # --budget 2: the default and the cheapest other config, never the 32768-element block on one warp
    h200 = Device.model_validate(H200)
    assert candidate_configs(family, KEY, h200, 2) == [{"BLOCK_N": 1024, "num_warps": 8}, {"BLOCK_N": 1024, "num_warps": 1}]
    custom = _family(compile_cost=lambda config: -elements_per_thread(config))
    assert custom.space(KEY)[0] == {"BLOCK_N": 32768, "num_warps": 1}


@pytest.mark.slow
def test_the_bytes_of_a_call_are_sized_without_importing_torch_here(tmp_path: Path) -> None:
    """The example's family gives inputs and outputs and no traffic_bytes: the tuner's
    parent sizes a call in a child process (which imports torch), never in its own."""
    code = textwrap.dedent("""
        import sys
        from acme_layernorm import SPEC
        sized = SPEC.traffic({"M": 4, "N": 1000, "dtype": "bf16"})
        assert "torch" not in sys.modules, "the parent imported torch"
        print(sized, SPEC.traffic({"M": 4, "N": 1000, "dtype": "bf16"}))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "examples" / "acme-layernorm"), *sys.path])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    # x 4x1000 bf16, weight and bias 1000 bf16, y 4x1000 bf16, mean and rstd 4 fp32
    assert done.stdout.split() == [str(8000 + 2000 + 2000 + 8000 + 16 + 16)] * 2


def test_a_lambda_for_inputs_without_traffic_bytes_is_a_clear_error_where_torch_is_not_imported(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        from flyconfigs.errors import TuneError
        from flyconfigs.kernels.triton_family import TritonFamily
        f = TritonFamily(name="f", configs=[{"BLOCK_N": 8}], default={"BLOCK_N": 8}, launch="m:l", reference="m:r",
                         inputs=lambda key, device: ())
        try:
            f.traffic({"M": 1, "N": 8, "dtype": "fp32"})
        except TuneError as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "give inputs as 'module:attribute', or give traffic_bytes=" in done.stdout
