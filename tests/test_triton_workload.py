"""What every Triton workload shares (flyconfigs.kernels.triton_workload), whichever family
made it: Triton's "this config cannot be built" errors are a CompileError, a failed
launch a GPUError, anything else propagates; resources are read from what Triton's
launch returned, and are nothing where Triton compiled nothing.  On the CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from triton_interpreter import use_interpreter

use_interpreter()

import triton  # noqa: E402

from flyconfigs.errors import CompileError, GPUError  # noqa: E402
from flyconfigs.kernels.triton_workload import compiled_resources, launch_errors  # noqa: E402
from flyconfigs.schema.models import Resources  # noqa: E402


@pytest.mark.parametrize("raised, mapped, said", [
    (triton.OutOfResources(232448, 101376, "shared memory"), CompileError, "Triton: OutOfResources: "),
    (RuntimeError("an illegal memory access was encountered"), GPUError, "the launch failed: an illegal memory"),
])
def test_triton_errors_become_the_tuners_errors(raised: Exception, mapped: type[Exception], said: str) -> None:
    with pytest.raises(mapped, match=said), launch_errors():
        raise raised


def test_any_other_error_is_a_bug_and_propagates() -> None:
    with pytest.raises(KeyError), launch_errors():
        raise KeyError("BLOCK")


def test_resources_come_from_the_compiled_kernel_and_are_none_without_one() -> None:
    # A stand-in for the kernel Triton returns on a GPU: the CPU compiles no binary.
    loaded: list[bool] = []
    compiled = SimpleNamespace(n_regs=40, n_spills=2, metadata=SimpleNamespace(shared=1024),
                               _init_handles=lambda: loaded.append(True))
    assert compiled_resources(compiled) == Resources(registers=40, spill_bytes=8, shared_bytes=1024) and loaded
    assert compiled_resources(None) is None
    assert compiled_resources(SimpleNamespace()) is None  # the interpreter's launch returns no binary
