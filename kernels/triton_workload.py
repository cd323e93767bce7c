"""One key's inputs for a Triton kernel in the measuring process (a
:class:`~flyconfigs.kernels.plugin.Workload`), whatever declared it: the row-wise helper
(:mod:`flyconfigs.kernels.triton_family`) or the ``triton.autotune`` drop-in
(:mod:`flyconfigs.kernels.triton_autotune`).

``copies`` rotated argument sets are made up front; a check fills every output with NaN,
launches once and compares each output with its float64 reference within its dtype's
tolerance (:class:`~flyconfigs.kernels.output_check.OutputCheck`), so an output the
kernel never wrote fails.  Triton's "this config cannot be built" errors (a compile
error, too many resources, the interpreter refusing a program) become
:class:`~flyconfigs.errors.CompileError`, a failed launch
:class:`~flyconfigs.errors.GPUError`; anything else is a bug in the launch or the
reference and propagates.  Imports torch and Triton.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
import triton
from triton.runtime.errors import InterpreterError

from flyconfigs.errors import CompileError, GPUError, TuneError
from flyconfigs.kernels.output_check import OutputCheck
from flyconfigs.kernels.plugin import Workload
from flyconfigs.kernels.torch_dtypes import NAME_OF, TORCH_DTYPES
from flyconfigs.schema.models import Resources

if TYPE_CHECKING:
    from flyconfigs.kernels.triton_family import TritonFamily

__all__ = ["CANNOT_BUILD", "TritonWorkload", "compiled_resources", "default_inputs", "launch_errors", "row_workload",
           "tensor_bytes"]

CANNOT_BUILD: tuple[type[BaseException], ...] = (triton.CompilationError, triton.OutOfResources, InterpreterError)
"""Triton's errors that mean a config cannot be built for this key (scored, not raised)."""

Args = dict[str, Any]


def tensor_bytes(values: Sequence[Any] | Mapping[str, Any]) -> int:
    """Bytes of the tensors among ``values`` (a sequence, or a mapping's values)."""
    items = values.values() if isinstance(values, Mapping) else values
    return sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))


def _config_key(config: Mapping[str, Any]) -> str:
    return repr(sorted(config.items()))


@contextmanager
def launch_errors() -> Iterator[None]:
    """Inside it, Triton's errors for a config that cannot be built (:data:`CANNOT_BUILD`)
    are :class:`~flyconfigs.errors.CompileError` and a failed launch (``RuntimeError``)
    is :class:`~flyconfigs.errors.GPUError`; anything else propagates."""
    try:
        yield
    except CANNOT_BUILD as exc:
        raise CompileError(f"Triton: {type(exc).__name__}: {exc}") from None
    except RuntimeError as exc:
        raise GPUError(f"the launch failed: {exc}") from None


def compiled_resources(compiled: Any) -> Resources | None:
    """Registers, spills and shared memory of a kernel Triton's launch returned;
    ``None`` where Triton says nothing (its interpreter compiles nothing)."""
    if compiled is None or not hasattr(compiled, "n_regs"):
        return None
    try:
        # n_regs and n_spills are read from the loaded binary, which Triton loads lazily.
        compiled._init_handles()
        shared = int(getattr(compiled.metadata, "shared", 0))
        return Resources(registers=int(compiled.n_regs), spill_bytes=int(compiled.n_spills) * 4, shared_bytes=shared)
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None


class TritonWorkload(Workload):
    """Rotated arguments of one key and the check of one config against its reference.

    ``make()`` returns one call's arguments; ``reference(args)`` the float64 value of
    each output argument, by name, computed before any launch; ``launch(config, args)``
    runs the kernel (returning what Triton's launch returns, for :meth:`resources`)."""

    def __init__(self, make: Callable[[], Args], reference: Callable[[Args], Mapping[str, torch.Tensor]],
                 launch: Callable[[Mapping[str, Any], Args], Any], copies: int, device: str, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self._launch = launch
        self._device = torch.device(device)
        self.args = [make() for _ in range(max(1, copies))]
        expected = reference(self.args[0])
        self._checks: dict[str, OutputCheck] = {}
        for name, value in expected.items():
            out = self.args[0].get(name)
            if not isinstance(out, torch.Tensor) or out.dtype not in NAME_OF:
                raise TuneError(f"the reference gives output {name!r}, which is not a bf16, fp16 or fp32 tensor argument")
            self._checks[name] = OutputCheck.of(value.double(), NAME_OF[out.dtype])
        if not self._checks:
            raise TuneError("the reference names no output to check")
        self._compiled: dict[str, Any] = {}

    @property
    def copies(self) -> int:
        return len(self.args)

    def launcher(self, config: Mapping[str, Any]) -> Callable[[int], None]:
        cfg, args, launch = dict(config), self.args, self._launch

        def run(i: int) -> None:
            launch(cfg, args[i])

        return run

    def check(self, config: Mapping[str, Any]) -> str | None:
        """Run ``config`` once into NaN-filled outputs; ``None`` when every output
        matches its reference, else what is wrong."""
        args = self.args[0]
        for name in self._checks:
            args[name].fill_(float("nan"))
        with launch_errors():
            compiled = self._launch(config, args)
            if self._device.type == "cuda":
                torch.cuda.synchronize(self._device)
        self._compiled[_config_key(config)] = compiled
        wrong = [f"{name}: {why}" for name, check in self._checks.items() if (why := check.mismatch(args[name])) is not None]
        return "; ".join(wrong) or None

    def resources(self, config: Mapping[str, Any]) -> Resources | None:
        """Registers, spills and shared memory Triton reports for the compiled variant;
        ``None`` where Triton says nothing (its interpreter compiles nothing)."""
        return compiled_resources(self._compiled.get(_config_key(config)))


def default_inputs(key: Mapping[str, Any], device: str) -> tuple[torch.Tensor, ...]:
    """A row-wise kernel's one input: ``x``, ``M × N`` standard normal values in ``dtype``."""
    return (torch.randn(int(key["M"]), int(key["N"]), device=device).to(TORCH_DTYPES[str(key["dtype"])]),)


def _one_output(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (torch.empty_like(inputs[0]),)


def row_workload(family: TritonFamily, key: Mapping[str, Any], copies: int, device: str) -> TritonWorkload:
    """The workload of a :class:`~flyconfigs.kernels.triton_family.TritonFamily`: its
    inputs and outputs per copy (``out``, or ``out0``, ``out1``, … for several), every
    output checked against its reference."""
    from flyconfigs.kernels.triton_family import load_ref

    make_inputs = load_ref(family.inputs, f"{family.name}: inputs") if family.inputs is not None else default_inputs
    make_outputs = load_ref(family.outputs, f"{family.name}: outputs") if family.outputs is not None else _one_output
    launch = load_ref(family.launch, f"{family.name}: launch")
    reference = load_ref(family.reference, f"{family.name}: reference")
    norm = family.check_key(key)
    names: list[str] = []

    def make() -> Args:
        inputs = tuple(make_inputs(norm, device))
        outputs = tuple(make_outputs(*inputs))
        names[:] = ["out"] if len(outputs) == 1 else [f"out{i}" for i in range(len(outputs))]
        return {"inputs": inputs, **dict(zip(names, outputs, strict=True))}

    def expected(args: Args) -> dict[str, torch.Tensor]:
        values = reference(*args["inputs"])
        values = (values,) if isinstance(values, torch.Tensor) else tuple(values)
        if len(values) != len(names):
            raise TuneError(f"{family.name}: the reference gives {len(values)} values for {len(names)} outputs")
        return dict(zip(names, values, strict=True))

    return TritonWorkload(make, expected, lambda config, args: launch(config, *args["inputs"], *(args[n] for n in names)),
                          copies, device)
