"""The row-wise Triton helper: a kernel declared with the key, the configs, the default,
the launch and the reference (the example distribution ``examples/acme-silu-mul``) gets
the rest of the plugin protocol — membership checks before the family's rules, the
space, the traffic, the source digest, Triton's version, ``build() is None`` and a
workload whose check poisons the output, compares it with the reference and maps
Triton's errors.  Its kernel runs on the CPU with Triton's interpreter."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from triton_interpreter import use_interpreter

use_interpreter()

import torch  # noqa: E402

from flyconfigs.errors import CompileError, InvalidKeyError, TuneError  # noqa: E402
from flyconfigs.kernels.plugin import TunableKernel  # noqa: E402
from flyconfigs.kernels.triton_family import TritonFamily, same_config, tunable_values  # noqa: E402
from flyconfigs.registry import KernelDecl  # noqa: E402

EXAMPLE = Path(__file__).parents[1] / "examples" / "acme-silu-mul"
sys.path.insert(0, str(EXAMPLE))

from acme_silu_mul import SPEC  # noqa: E402

KEY = {"M": 3, "N": 1000, "dtype": "fp32"}


def _family(**changes: Any) -> TritonFamily:
    fields = {"name": "scale_rows", "configs": {"BLOCK": (16, 32, 48, 1024), "num_warps": (1, 4)},
              "default": {"BLOCK": 32, "num_warps": 1}, "launch": _scale_launch, "reference": lambda x: x.double() * 2,
              **changes}
    return TritonFamily(**fields)


def _scale_launch(config: Any, x: Any, out: Any) -> Any:
    """A kernel that covers one block of each row only: configs narrower than the row
    leave the rest unwritten."""
    import triton
    import triton.language as tl

    @triton.jit
    def scale(X, Y, N, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        row = tl.program_id(0) * N
        tl.store(Y + row + cols, tl.load(X + row + cols, mask=cols < N) * 2, mask=cols < N)

    return scale[(x.shape[0],)](x, out, x.shape[1], BLOCK=config["BLOCK"], num_warps=config["num_warps"])


def test_the_example_is_a_tunable_declaration() -> None:
    assert isinstance(SPEC, KernelDecl) and isinstance(SPEC, TunableKernel)
    assert [a.name for a in SPEC.key_axes] == ["M", "N", "dtype"]
    assert SPEC.tunables == {"BLOCK_N": (256, 512, 1024, 2048, 4096), "num_warps": (1, 2, 4, 8)}
    assert SPEC.build({"BLOCK_N": 256, "num_warps": 1}, KEY, None) is None
    assert SPEC.tool_versions()["triton"]
    assert SPEC.traffic(KEY) == 3 * 3 * 1000 * 4


def test_membership_is_checked_before_the_family_rules() -> None:
    assert SPEC.check_config({"BLOCK_N": 1024}, KEY, None) == "not a acme_silu_mul config: missing num_warps"
    assert "unknown extra" in str(SPEC.check_config({"BLOCK_N": 1024, "num_warps": 4, "extra": 1}, KEY, None))
    assert SPEC.check_config({"BLOCK_N": 1000, "num_warps": 4}, KEY, None) == (
        "BLOCK_N=1000 is not one of 256, 512, 1024, 2048, 4096")
    assert SPEC.check_config({"BLOCK_N": 1024.0, "num_warps": 4}, KEY, None) is not None
    assert SPEC.check_config({"BLOCK_N": 256, "num_warps": 4}, {**KEY, "N": 20000}, None) == "more than 64 chunks per row"
    assert SPEC.check_config({"BLOCK_N": 256, "num_warps": 4}, KEY, None) is None


def test_a_listed_space_serves_only_its_configs() -> None:
    family = _family(configs=[{"BLOCK": 16, "num_warps": 1}, {"BLOCK": 32, "num_warps": 4}],
                     default={"BLOCK": 16, "num_warps": 1})
    assert family.check_config({"BLOCK": 16, "num_warps": 4}, KEY, None) == (
        "{'BLOCK': 16, 'num_warps': 4} is not one of the 2 configs scale_rows lists")
    # Cheapest to compile first: 32 elements over 4 warps is 0.25 a thread, 16 over 1 is 0.5.
    assert family.space(KEY) == [{"BLOCK": 32, "num_warps": 4}, {"BLOCK": 16, "num_warps": 1}]


def test_the_space_is_what_the_rules_accept_with_the_default_first_when_it_is_not() -> None:
    wide = {**KEY, "N": 20000}
    space = SPEC.space(wide)
    assert all(c["BLOCK_N"] >= 512 for c in space) and len(space) == 16
    assert SPEC.default_config(wide, None) == {"BLOCK_N": 4096, "num_warps": 8}
    narrow = _family(rules=lambda c, k: None if c["BLOCK"] == 1024 else "too narrow")
    assert narrow.space(KEY)[0] == {"BLOCK": 32, "num_warps": 1}
    with pytest.raises(InvalidKeyError, match="'dtype'"):
        SPEC.space({**KEY, "dtype": "int8"})


def test_the_source_digest_is_read_without_importing_the_kernel() -> None:
    sys.modules.pop("acme_silu_mul.kernel", None)
    digest = SPEC.source_sha256()
    assert "acme_silu_mul.kernel" not in sys.modules
    assert digest == hashlib.sha256((EXAMPLE / "acme_silu_mul" / "kernel.py").read_bytes()).hexdigest()


def test_the_workload_checks_each_config_against_the_reference() -> None:
    work = SPEC.workload(KEY, 2, None, device="cpu")
    assert work.copies == 2 and not torch.equal(work.args[0]["inputs"][0], work.args[1]["inputs"][0])
    for config in ({"BLOCK_N": 256, "num_warps": 1}, {"BLOCK_N": 1024, "num_warps": 4}):
        assert work.check(config) is None
        assert work.resources(config) is None  # the interpreter compiles nothing
    work.launcher({"BLOCK_N": 512, "num_warps": 2})(1)
    gate, up = work.args[1]["inputs"]
    assert torch.allclose(work.args[1]["out"].double(), gate.double() * torch.sigmoid(gate.double()) * up.double() * 0.5)


def test_an_output_left_unwritten_or_a_config_triton_cannot_build_is_reported() -> None:
    work = _family().workload(KEY, 1, None, device="cpu")
    assert work.check({"BLOCK": 1024, "num_warps": 4}) is None
    assert work.check({"BLOCK": 32, "num_warps": 4}) == "out: 2904 outputs unwritten or NaN"
    with pytest.raises(CompileError, match="power of 2"):
        work.check({"BLOCK": 48, "num_warps": 1})
    wrong = _family(reference=lambda x: x.double() * 3).workload(KEY, 1, None, device="cpu")
    assert "outputs off the float64 reference" in str(wrong.check({"BLOCK": 1024, "num_warps": 4}))


def test_a_declaration_missing_a_part_is_refused() -> None:
    with pytest.raises(TypeError, match="configs is empty"):
        _family(configs=[])
    with pytest.raises(TypeError, match=r"configs\[1\] names"):
        _family(configs=[{"BLOCK": 16}, {"BLOCK": 32, "num_warps": 1}])
    with pytest.raises(TypeError, match="the default {'BLOCK': 64, 'num_warps': 1} is not a declared config"):
        _family(default={"BLOCK": 64, "num_warps": 1})
    with pytest.raises(TypeError, match="needs inputs="):
        _family(key_axes=SPEC.key_axes[:2])
    with pytest.raises(TypeError, match="launch 'no_colon' must be a callable or 'module:attribute'"):
        _family(launch="no_colon")
    with pytest.raises(TypeError, match="reference 'no_colon' must be"):
        _family(reference="no_colon", source="acme_silu_mul.kernel")
    with pytest.raises(TuneError, match="cannot be loaded"):
        _family(launch="acme_silu_mul.kernel:missing").workload(KEY, 1, None, device="cpu")


def test_the_declaration_imports_neither_torch_nor_triton() -> None:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import acme_silu_mul; acme_silu_mul.SPEC.source_sha256(); "
            "acme_silu_mul.SPEC.space({'M': 1, 'N': 64, 'dtype': 'bf16'}); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'triton', 'numpy'}))")
    result = subprocess.run([sys.executable, "-c", code, str(EXAMPLE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_tunables_values_are_told_apart_by_type_in_order_of_appearance() -> None:
    configs = [{"BLOCK": 64, "EVEN": True}, {"BLOCK": 1, "EVEN": 1}, {"BLOCK": 64, "EVEN": 1.0}]
    assert tunable_values(configs) == {"BLOCK": (64, 1), "EVEN": (True, 1, 1.0)}
    assert [type(v) for v in tunable_values(configs)["EVEN"]] == [bool, int, float]
    assert same_config(configs[0], {"EVEN": True, "BLOCK": 64})
    assert not same_config(configs[1], {"BLOCK": 1, "EVEN": True}) and not same_config(configs[0], {"BLOCK": 64})
