"""The kernel plugin protocol: what a kernel family provides so that flyconfigs can tune it.

A family is declared through the ``flyconfigs.kernels`` entry-point group by an object
that satisfies :class:`~flyconfigs.registry.KernelDecl` (what the loader needs to serve
it: key axes, config validity, the default).  To be tuned it also satisfies
:class:`TunableKernel`: the space to search, the bytes a call moves, a digest of its
source, a build step (a :class:`~flyconfigs.gpu.CompileRequest` for the GPU layer, or
``None`` for languages that compile on first launch, such as Triton) and a
:class:`Workload` (inputs for one key, the reference check, a launch of one config).

The tuner sees a kernel only through these protocols and loads it by its entry-point
name in every process it starts, so a package outside this repository is tuned exactly
like the kernels shipped here.  This module imports neither torch nor a GPU runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from flyconfigs.errors import TuneError
from flyconfigs.registry.declarations import KernelDecl, KeyValue, kernel_declaration
from flyconfigs.registry.device import DeviceQuery
from flyconfigs.schema.models import Config

if TYPE_CHECKING:
    from flyconfigs.gpu import Backend, CompileRequest
    from flyconfigs.schema.models import Device, Resources

__all__ = ["Config", "CostModel", "TunableKernel", "Workload", "complete_key", "cost_model", "key_presets",
           "tool_versions", "tunable_kernel"]



@runtime_checkable
class Workload(Protocol):
    """One key's inputs on the GPU, made in the measuring process.

    Errors a candidate causes are raised as :class:`~flyconfigs.errors.CompileError`
    (it does not build) or :class:`~flyconfigs.errors.GPUError` (it faulted; the
    process is restarted before the next candidate).

    A workload may also define ``release(keep: Sequence[Config]) -> int``: unload every
    variant the process has loaded except ``keep``'s, since a launch grows slower as a
    process loads more code.  Where it exists the measurer calls it before each timing
    (keeping the configs timed) and before the next key (keeping none)."""

    @property
    def copies(self) -> int:
        """How many rotated input sets were allocated (``run(i)`` takes ``0 <= i < copies``)."""
        ...

    def check(self, config: Mapping[str, KeyValue]) -> str | None:
        """Run ``config`` once on poisoned outputs and compare with the reference:
        ``None`` when it matches, else what is wrong, in a sentence."""
        ...

    def launcher(self, config: Mapping[str, KeyValue]) -> Callable[[int], None]:
        """``run(i)``: one call of ``config`` on copy ``i``, enqueued on torch's current
        stream and safe to capture in a CUDA or HIP graph."""
        ...

    def resources(self, config: Mapping[str, KeyValue]) -> Resources | None:
        """Registers, spills, shared memory and occupancy of ``config`` after
        :meth:`check` built it, or ``None`` when the language does not say."""
        ...


class CostModel(Protocol):
    """Ranks a key's compiled configs without running them (``flyconfigs predict``)."""

    @property
    def name(self) -> str:
        """The model's name, recorded in each predicted artifact's provenance."""
        ...

    @property
    def version(self) -> int:
        """Its version: a refit or a change of formula is a new one."""
        ...

    def block_threads(self, config: Mapping[str, KeyValue]) -> int:
        """Threads per block of ``config``, for the occupancy its resources allow."""
        ...

    def predict(self, configs: Sequence[Mapping[str, KeyValue]], key: Mapping[str, KeyValue], device: Device,
                resources: Sequence[Resources]) -> list[float]:
        """Predicted µs per call of each config at ``key`` on ``device``, from the
        descriptor, the key and each config's compiled resources alone."""
        ...


@runtime_checkable
class TunableKernel(KernelDecl, Protocol):
    """A kernel declaration the tuner can search.

    Optional members, read when present: ``presets`` (a mapping of grid names such as
    ``"perf"`` to grid expressions), ``complete_key(key)`` (fills axes a grid may leave
    out, e.g. a weight dtype that defaults to the activation dtype),
    ``tool_versions()`` (versions of the compilers it brings, such as Triton's, recorded
    in each artifact's provenance), ``cost_model`` (a :class:`CostModel`, for
    ``flyconfigs predict``) and ``tunable_defaults`` (tunables added after configs were
    published, each with the value a config that leaves it out means)."""

    def space(self, key: Mapping[str, KeyValue], device: DeviceQuery) -> list[Config]:
        """The configs worth timing for ``key`` on ``device``, each valid for both; the
        default among them; never empty."""
        ...

    def traffic(self, key: Mapping[str, KeyValue]) -> int:
        """Bytes one call must move at ``key`` (for rotation and bandwidth figures)."""
        ...

    def source_sha256(self) -> str:
        """sha256 of the kernel's source: an artifact made from other source is stale."""
        ...

    def build(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue],
              device: DeviceQuery) -> CompileRequest | None:
        """What to compile ahead for ``config`` (compiled in parallel, through the
        GPU layer's cache, before anything runs), or ``None`` when the kernel compiles
        on its first launch."""
        ...

    def workload(self, key: Mapping[str, KeyValue], copies: int, backend: Backend) -> Workload:
        """Allocate ``copies`` rotated input sets for ``key`` on ``backend``'s device."""
        ...


def tunable_kernel(name: str) -> TunableKernel:
    """The declaration of ``name``, checked to be tunable; :class:`TuneError` saying
    what is missing, :class:`~flyconfigs.errors.UnknownKernelError` if none is declared."""
    decl = kernel_declaration(name)
    if not isinstance(decl, TunableKernel):
        missing = [m for m in ("space", "traffic", "source_sha256", "build", "workload") if not hasattr(decl, m)]
        raise TuneError(f"kernel {name!r} cannot be tuned: its declaration has no {', '.join(missing)}")
    return decl


def key_presets(decl: KernelDecl) -> Mapping[str, Sequence[str]]:
    """The kernel's named grids (``presets``), or none."""
    presets = getattr(decl, "presets", None)
    return presets if isinstance(presets, Mapping) else {}


def complete_key(decl: KernelDecl, key: Mapping[str, KeyValue]) -> dict[str, KeyValue]:
    """``key`` with the axes the kernel fills in itself (``complete_key``), if it does."""
    fill = getattr(decl, "complete_key", None)
    return dict(fill(key)) if callable(fill) else dict(key)


def tool_versions(decl: KernelDecl) -> dict[str, str]:
    """Versions of the compilers the kernel brings (``tool_versions()``), if it says."""
    versions = getattr(decl, "tool_versions", None)
    return {str(k): str(v) for k, v in versions().items()} if callable(versions) else {}


def cost_model(decl: KernelDecl) -> CostModel:
    """The kernel's ``cost_model``; :class:`TuneError` when it declares none."""
    model = getattr(decl, "cost_model", None)
    if model is None or not callable(getattr(model, "predict", None)):
        raise TuneError(f"kernel {decl.name!r} declares no cost model: it can be tuned, not predicted")
    return model  # type: ignore[no-any-return]
