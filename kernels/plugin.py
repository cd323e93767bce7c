"""The kernel plugin contract: what a kernel family provides so that flyconfigs can serve,
tune and predict it.

A family is declared through the ``flyconfigs.kernels`` entry-point group by an instance
of a subclass of :class:`TunableKernel` (or, for a family that is only served, of its base
:class:`~flyconfigs.registry.KernelDecl`).  The two classes hold every member the
registry, the tuner and the predictor read; the optional ones have defaults, so
``mypy --strict`` checks a plugin against them and nothing reads a member that is not
declared here.  To be tuned a family gives the space to search, the bytes a call moves,
a digest of its source, optionally a build step (a :class:`~flyconfigs.gpu.CompileRequest`
for the GPU layer; by default nothing, for languages that compile on first launch, such
as Triton) and a :class:`Workload` (inputs for one key, the reference check, a launch of
one config).

The tuner sees a kernel only through these classes and loads it by its entry-point
name in every process it starts, so a package outside this repository is tuned exactly
like the kernels shipped here.  This module also re-exports every name of
:mod:`flyconfigs.registry.plugin` (the serving contract), so a tunable family imports
this one module.  It imports neither torch nor a GPU runtime.
``docs/plugins.md`` says where each member runs.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from flyconfigs.errors import TuneError
from flyconfigs.registry.plugin import (
    DEVICE_ARGUMENT,
    NAME_PATTERN,
    Default,
    DeviceMatch,
    DeviceQuery,
    KernelDecl,
    KeyAxis,
    KeyValue,
    Neighbour,
    SourceBinding,
    SpelledKey,
    Tie,
    TunableVariants,
    as_query,
    check_config,
    check_key,
    check_tunables,
    config_token,
    default_config,
    device_match,
    file_order,
    kernel_declaration,
    log_distance,
    normalize_key,
    own_check_config,
    refusal,
    register_kernel,
    report_fault,
    spelled_key,
    unregister_kernel,
)
from flyconfigs.schema.models import Config

if TYPE_CHECKING:
    from flyconfigs.gpu import Backend, CompileRequest
    from flyconfigs.schema.models import Device, Resources

__all__ = [
    "Config",
    "CostModel",
    "DEVICE_ARGUMENT",
    "Default",
    "DeviceMatch",
    "DeviceQuery",
    "KernelDecl",
    "KeyAxis",
    "KeyValue",
    "NAME_PATTERN",
    "Neighbour",
    "SourceBinding",
    "SpelledKey",
    "Tie",
    "TunableKernel",
    "TunableVariants",
    "Workload",
    "as_query",
    "check_config",
    "check_key",
    "check_tunables",
    "complete_key",
    "cost_model",
    "default_config",
    "device_match",
    "file_order",
    "kernel_declaration",
    "key_presets",
    "log_distance",
    "normalize_key",
    "own_check_config",
    "refusal",
    "register_kernel",
    "report_fault",
    "config_token",
    "spelled_key",
    "tool_versions",
    "tunable_kernel",
    "unregister_kernel",
]



@runtime_checkable
class Workload(Protocol):
    """One key's inputs on the GPU, made in the measuring process.

    Errors a candidate causes are raised as :class:`~flyconfigs.errors.CompileError`
    (it does not build) or :class:`~flyconfigs.errors.GPUError` (it faulted; the
    process is restarted before the next candidate).

    Subclass it: the measurer refuses a workload that is not a :class:`Workload`, and the
    optional :meth:`release` then has its default."""

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

    def release(self, keep: Sequence[Mapping[str, KeyValue]]) -> int:
        """Unload every variant the process has loaded except ``keep``'s, since a launch
        grows slower as a process loads more code; returns how many were unloaded.  The
        measurer calls it before each timing (keeping the configs timed) and before the
        next key (keeping none).  Default: nothing to unload."""
        return 0


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


class TunableKernel(KernelDecl):
    """A kernel declaration the tuner can search: :class:`~flyconfigs.registry.KernelDecl`
    plus the tuner's and the predictor's members.

    Required: :meth:`space`, :meth:`traffic`, :meth:`source_sha256` and :meth:`workload`.
    Optional, with defaults: :meth:`build`, :attr:`presets`, :meth:`complete_key`,
    :meth:`tool_versions` and :attr:`cost_model`.

    :meth:`workload` runs only in the measuring process (it may import torch and
    Triton); every other member also runs in the tuner's parent, which never imports
    them."""

    @abstractmethod
    def space(self, key: Mapping[str, KeyValue], device: DeviceQuery) -> list[Config]:
        """The configs worth timing for ``key`` on ``device``, each valid for both; the
        default among them; never empty."""

    @abstractmethod
    def traffic(self, key: Mapping[str, KeyValue]) -> int:
        """Bytes one call must move at ``key`` (for rotation and bandwidth figures)."""

    @abstractmethod
    def source_sha256(self) -> str:
        """sha256 of the kernel's source, recorded in every artifact (see
        :attr:`~flyconfigs.registry.KernelDecl.source_binding`)."""

    @abstractmethod
    def workload(self, key: Mapping[str, KeyValue], copies: int, backend: Backend) -> Workload:
        """Allocate ``copies`` rotated input sets for ``key`` on ``backend``'s device."""

    def build(self, config: Mapping[str, KeyValue], key: Mapping[str, KeyValue],
              device: DeviceQuery) -> CompileRequest | None:
        """What to compile ahead for ``config`` (compiled in parallel, through the
        GPU layer's cache, before anything runs), or ``None`` (the default) when the
        kernel compiles on its first launch."""
        return None

    def complete_key(self, key: Mapping[str, KeyValue]) -> dict[str, KeyValue]:
        """``key`` with the axes a grid may leave out filled in (e.g. a weight dtype
        that defaults to the activation dtype); default: ``key`` as given."""
        return dict(key)

    def tool_versions(self) -> Mapping[str, str]:
        """Versions of the compilers the kernel brings (such as Triton's), recorded in
        each artifact's provenance; default none."""
        return {}

    if TYPE_CHECKING:
        @property
        def presets(self) -> Mapping[str, Sequence[str]]:
            """Named key grids (such as ``"perf"``), each a sequence of grid expressions;
            default none."""

        @property
        def cost_model(self) -> CostModel | None:
            """The model that ranks compiled configs (``flyconfigs predict``); default none."""
    else:
        presets = Default(MappingProxyType({}))
        cost_model = Default(None)


def tunable_kernel(name: str) -> TunableKernel:
    """The declaration of ``name``, checked to be tunable; :class:`TuneError` saying
    what it lacks, :class:`~flyconfigs.errors.UnknownKernelError` if none is declared."""
    decl = kernel_declaration(name)
    if not isinstance(decl, TunableKernel):
        raise TuneError(f"kernel {name!r} cannot be tuned: its declaration is not a flyconfigs.kernels.plugin."
                        f"TunableKernel (it declares no space, traffic, source or workload)")
    return decl


def key_presets(decl: KernelDecl) -> Mapping[str, Sequence[str]]:
    """The kernel's named grids (:attr:`TunableKernel.presets`), or none."""
    return decl.presets if isinstance(decl, TunableKernel) else {}


def complete_key(decl: KernelDecl, key: Mapping[str, KeyValue]) -> dict[str, KeyValue]:
    """``key`` with the axes the kernel fills in itself (:meth:`TunableKernel.complete_key`)."""
    return dict(decl.complete_key(key)) if isinstance(decl, TunableKernel) else dict(key)


def tool_versions(decl: KernelDecl) -> dict[str, str]:
    """Versions of the compilers the kernel brings (:meth:`TunableKernel.tool_versions`)."""
    return {str(k): str(v) for k, v in decl.tool_versions().items()} if isinstance(decl, TunableKernel) else {}


def cost_model(decl: KernelDecl) -> CostModel:
    """The kernel's :attr:`TunableKernel.cost_model`; :class:`TuneError` when it declares none."""
    model = decl.cost_model if isinstance(decl, TunableKernel) else None
    if model is None:
        raise TuneError(f"kernel {decl.name!r} declares no cost model: it can be tuned, not predicted")
    return model
