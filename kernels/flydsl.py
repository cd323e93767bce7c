"""FlyDSL kernels, declared as FlyDSL itself identifies and checks them.

A FlyDSL kernel tuned with ``flydsl.autotune`` is named by its ``artifact_name``; in
flyconfigs it lives in a namespace of its own, ``flydsl.<artifact_name>``, so FlyDSL's
``rmsnorm`` and flyconfigs' own ``rmsnorm`` never share a key, a file, a package row or a
command line (``flyconfigs explain flydsl.rmsnorm …``).  FlyDSL's names take at most 64
characters; in the namespace at most :data:`MAX_ARTIFACT_NAME`.

:class:`FlyDSLKernel` applies FlyDSL's own rules (``flydsl/autotune.py``, 0.4.2 to 0.5.0):

- the key is exactly the tuner's ``key`` parameters, matched exactly (FlyDSL never serves
  a nearer key);
- a config never sets a key parameter or a ``pre_hook``; ``waves_per_eu`` (FlyDSL's one
  compiler option) is an ``int``; every other entry is a parameter of the kernel (FlyDSL
  passes ``num_warps`` to the kernel too), of the type its annotation states:
  ``fx.Constexpr[int]`` takes an ``int`` only (not ``"512"``, ``512.0`` nor ``True``),
  as FlyDSL's ``__coerce__`` checks it;
- a config is served to the exact device FlyDSL's identity names (product, arch and
  compute units) unless the user opts into borrowing one of the same arch.

:data:`RMSNORM` declares FlyDSL's own RMSNorm adopter.  This module imports neither
``flydsl`` nor torch.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence

from flyconfigs.errors import ArtifactError, ConfigurationError, FieldProblem, FlyconfigsError, InvalidKeyError
from flyconfigs.registry.plugin import DeviceMatch, DeviceQuery, KernelDecl, KeyAxis, KeyValue, kernel_declaration, refusal
from flyconfigs.schema.flydsl import NAMESPACE
from flyconfigs.schema.models import Artifact

__all__ = [
    "COMPILER_OPTIONS",
    "MAX_ARTIFACT_NAME",
    "NAMESPACE",
    "RMSNORM",
    "FlyDSLKernel",
    "artifact_name_of",
    "check_flydsl_artifact",
    "config_problem",
    "declaration_of",
    "kernel_name_of",
    "knob_problem",
    "refuse_unservable",
]

MAX_ARTIFACT_NAME = 64 - len(NAMESPACE)
"""The longest ``artifact_name`` flyconfigs can hold (a kernel name has at most 64 characters)."""
COMPILER_OPTIONS = ("waves_per_eu",)
"""What a FlyDSL ``Config`` passes to the compiler rather than to the kernel (each an ``int``)."""


def kernel_name_of(artifact_name: str) -> str:
    """``flydsl.<artifact_name>``; :class:`ConfigurationError` for a name FlyDSL would
    refuse (1–64 letters, digits, ``.``, ``_``, ``-``) or one too long for the namespace."""
    safe = artifact_name.replace("-", "").replace("_", "").replace(".", "")
    if not isinstance(artifact_name, str) or not artifact_name.isascii() or not safe.isalnum() or len(artifact_name) > 64:
        raise ConfigurationError(f"artifact_name {artifact_name!r} is not a FlyDSL artifact name (1-64 letters, digits, "
                                 "'.', '_' or '-')")
    if len(artifact_name) > MAX_ARTIFACT_NAME:
        raise ConfigurationError(f"artifact_name {artifact_name!r} has {len(artifact_name)} characters; flyconfigs holds "
                                 f"FlyDSL kernels as {NAMESPACE}<artifact_name> in at most 64, so at most "
                                 f"{MAX_ARTIFACT_NAME}")
    return NAMESPACE + artifact_name


def artifact_name_of(kernel: str) -> str | None:
    """FlyDSL's ``artifact_name`` of the flyconfigs kernel ``kernel``, or ``None`` when
    ``kernel`` is not in the FlyDSL namespace."""
    return kernel[len(NAMESPACE):] if kernel.startswith(NAMESPACE) and len(kernel) > len(NAMESPACE) else None


def knob_problem(name: str, value: object, annotation: object) -> str | None:
    """Why FlyDSL refuses ``value`` for a parameter annotated ``annotation``, or ``None``:
    an annotation with ``__coerce__`` (``fx.Constexpr[int]``, ``fx.Int32``) decides by
    it, a plain ``int``, ``float``, ``bool`` or ``str`` takes only a value of exactly that
    type, anything else (no annotation) takes any value."""
    coerce = getattr(annotation, "__coerce__", None)
    if callable(coerce):
        try:
            coerce(value)
        except (TypeError, ValueError, OverflowError) as exc:
            return f"{name}={value!r} does not match its annotation {getattr(annotation, '__name__', annotation)} ({exc})"
        return None
    if annotation in (bool, int, float, str) and type(value) is not annotation:
        return f"{name}={value!r} is not {getattr(annotation, '__name__', annotation)}, as the kernel's annotation says"
    return None


def config_problem(config: Mapping[str, object], key: Sequence[str], knobs: Mapping[str, object] | None,
                   open_knobs: bool = False) -> str | None:
    """Why FlyDSL's loader refuses ``config`` for a kernel keyed by ``key`` whose
    parameters a config may set are ``knobs`` (name -> annotation), or ``None``.
    ``knobs`` ``None``: the kernel's parameters are not known, so only the rules that need
    none are applied; ``open_knobs``: the kernel takes ``**kwargs`` besides ``knobs``."""
    for name, value in config.items():
        if name in key:
            return f"{name} is a key parameter; a config cannot set it"
        if name == "pre_hook":
            return "a stored config cannot hold a pre_hook"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{name}={value!r} is not a finite number"
        if name in COMPILER_OPTIONS:
            if type(value) is not int:
                return f"{name}={value!r} is not an int (a FlyDSL compiler option)"
            continue
        if knobs is None:
            continue
        if name not in knobs:
            if open_knobs:
                continue
            return f"{name} is not a parameter of the kernel a config can set ({', '.join(knobs) or 'none'})"
        why = knob_problem(name, value, knobs[name])
        if why is not None:
            return why
    return None


class FlyDSLKernel(KernelDecl):
    """A FlyDSL kernel: its ``artifact_name``, its key (``key``, then the ``optional_key``
    axes a call may add, each typed or ``object`` for any JSON value), the parameters a
    config may set (``knobs``: name -> annotation; ``None`` when not known) and the config
    FlyDSL uses when nothing is tuned (``default``; empty: FlyDSL's own order decides).

    Served to the exact device of FlyDSL's identity; ``borrow=True`` also serves one
    tuned on another device of the same arch (marked borrowed)."""

    name: str
    version = 1
    key_axes: tuple[KeyAxis, ...]
    device_match: DeviceMatch

    def __init__(self, artifact_name: str, key: Sequence[KeyAxis | str], knobs: Mapping[str, object] | None = None, *,
                 optional_key: Sequence[KeyAxis] = (), open_knobs: bool = False,
                 default: Mapping[str, KeyValue] | None = None, borrow: bool = False) -> None:
        self.artifact_name = artifact_name
        self.name = kernel_name_of(artifact_name)
        self.key_axes = tuple(a if isinstance(a, KeyAxis) else KeyAxis(a, object) for a in key)
        self.optional_key = tuple(optional_key)
        self.knobs = None if knobs is None else dict(knobs)
        self.open_knobs = open_knobs
        self.default = dict(default or {})
        self.borrow = borrow
        self.device_match = "arch" if borrow else "product"

    @classmethod
    def of_signature(cls, artifact_name: str, key: Sequence[str], signature: inspect.Signature,
                     default: Mapping[str, KeyValue] | None = None, borrow: bool = False) -> FlyDSLKernel:
        """The declaration of a kernel with this ``signature`` (a ``@jit`` function's):
        every parameter but the key's is a knob, with its annotation."""
        params = signature.parameters.values()
        knobs = {p.name: p.annotation for p in params if p.name not in key
                 and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)}
        open_knobs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        return cls(artifact_name, tuple(key), knobs, open_knobs=open_knobs, default=default, borrow=borrow)

    def borrowing(self, borrow: bool = True) -> FlyDSLKernel:
        """This declaration, served across the arch (``borrow``) or to the exact device only."""
        return FlyDSLKernel(self.artifact_name, self.key_axes, self.knobs, optional_key=self.optional_key,
                            open_knobs=self.open_knobs, default=self.default, borrow=borrow)

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` holding exactly the key parameters (and any optional ones), each of
        its axis's type, in order; :class:`InvalidKeyError` naming what is wrong."""
        axes = [*self.key_axes, *(a for a in self.optional_key if a.name in key)]
        names = [a.name for a in axes]
        if sorted(key) != sorted(names):
            raise InvalidKeyError(f"key for {self.name!r} must name exactly {', '.join(names)}, got "
                                  f"{', '.join(map(str, key)) or 'nothing'}")
        out: dict[str, KeyValue] = {}
        for axis in axes:
            value = key[axis.name]
            if axis.kind is not object:
                axis.check(self.name, value)
            elif isinstance(value, float) and not math.isfinite(value):
                raise InvalidKeyError(f"key axis {axis.name!r} of {self.name!r} must be a finite number, got {value!r}")
            out[axis.name] = value
        return out

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
        """Why FlyDSL's loader would refuse ``config`` (see :func:`config_problem`), or ``None``."""
        names = [a.name for a in (*self.key_axes, *self.optional_key)]
        return config_problem(config, names, self.knobs, self.open_knobs)

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """FlyDSL's untuned config (empty: FlyDSL's own order decides)."""
        return dict(self.default)


RMSNORM = FlyDSLKernel(
    "rmsnorm",
    key=(KeyAxis("m_in", int), KeyAxis("N", int), KeyAxis("dtype_str", str)),
    optional_key=(KeyAxis("weight_dtype_str", str),),
    knobs={"BLOCK_THREADS": int},
    default={"BLOCK_THREADS": 256},
)
"""FlyDSL's RMSNorm adopter (``kernels/norm/rmsnorm_autotune.py`` of ROCm/FlyDSL, PR #786):
``artifact_name="rmsnorm"``, keyed ``m_in, N, dtype_str`` (and ``weight_dtype_str``, which
the merged PR adds), tuning ``BLOCK_THREADS`` (``fx.Constexpr[int]``) and ``waves_per_eu``,
default ``BLOCK_THREADS=256``.  Its caller passes every other parameter, so a config sets
only those two."""


def check_flydsl_artifact(artifact: Artifact, file: str) -> None:
    """Refuse (:class:`ArtifactError` naming ``file`` and the field) an artifact of a FlyDSL
    kernel that FlyDSL's loader would refuse: its key must be the kernel's and its config
    pass the kernel's rules — the declared kernel's (such as :data:`RMSNORM`) where this
    environment declares it, else the rules that need no signature."""
    name = artifact_name_of(artifact.kernel.name)
    if name is None:
        return
    decl: KernelDecl
    try:
        decl = kernel_declaration(artifact.kernel.name)
    except FlyconfigsError:
        decl = FlyDSLKernel(name, tuple(artifact.key))
    refuse_unservable(decl, artifact, file, f"FlyDSL's loader refuses it for {decl.name}")


def refuse_unservable(decl: KernelDecl, artifact: Artifact, file: str, who: str) -> None:
    """Raise :class:`ArtifactError` naming ``file`` and the field where ``decl`` would not
    serve ``artifact``: its key is not the kernel's (``identity.key``) or its config breaks the
    kernel's rules (``config``, the reason after ``who``)."""
    try:
        key = decl.check_key(artifact.key)
    except InvalidKeyError as exc:
        raise ArtifactError(file, [FieldProblem("identity.key", str(exc))]) from None
    refused = refusal(decl, artifact, key, None)
    if refused is not None:
        raise ArtifactError(file, [FieldProblem("config", f"{who}: {refused[1]}")])


def declaration_of(kernel: str, key: Mapping[str, object]) -> KernelDecl | str:
    """What ``flyconfigs explain`` resolves for ``kernel``: a FlyDSL kernel's declaration
    where this environment has one, else (for a name in the FlyDSL namespace) one keyed
    by ``key``'s parameters whose knobs are not known; any other name as it is."""
    name = artifact_name_of(kernel)
    if name is None:
        return kernel
    try:
        return kernel_declaration(kernel)
    except FlyconfigsError:
        return FlyDSLKernel(name, tuple(key))
