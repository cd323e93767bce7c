"""The pydantic models of schema 1.x: a tuning artifact and its parts.

One :class:`Artifact` is one kernel on one device for one key.  Models are frozen and
strict: an int field takes only a JSON integer (never ``"64"``, ``true`` or ``64.0``),
floats must be finite, unknown fields are refused (readers of a newer minor strip and
report them first, see :mod:`flyconfigs.schema.load`), and every name that can end up in
a file name matches a conservative pattern.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StringConstraints,
    model_validator,
)

from flyconfigs.schema.canonical import canonical_bytes, same_value, sha256_hex

__all__ = [
    "SCHEMA_VERSION",
    "TEST_BACKENDS",
    "TEST_DEVICE_PRODUCT",
    "Artifact",
    "Candidate",
    "CandidateStatus",
    "Choice",
    "Config",
    "Device",
    "DeviceIdentity",
    "KernelRef",
    "Key",
    "KernelName",
    "ModelRef",
    "Scalar",
    "Value",
    "Provenance",
    "Resources",
    "ScreenProtocol",
    "Selection",
    "Source",
    "Timing",
    "TimingProtocol",
    "Vendor",
    "wave_size_of_arch",
    "GFX_ARCH",
]

SCHEMA_VERSION = "1.8"
"""The schema version this package writes; it reads any ``1.x``."""

TEST_BACKENDS = frozenset({"simulated"})
"""Backends that are test doubles: their artifacts are never published, and never served
to any device but the test backend's own."""
TEST_DEVICE_PRODUCT = "flyconfigs simulated device"
"""The product name of the test backend's device (its arch is ``simulated``)."""

Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
"""Lower-case, file-name safe: arches, targets, backends."""
KernelName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]*[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64)]
"""A kernel's name: 1–64 letters, digits, ``.``, ``_`` or ``-`` with at least one letter
or digit (FlyDSL's rule for ``artifact_name``; it never holds a path separator)."""
AxisName = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"),
    Field(description="A key axis or tunable: an ASCII identifier of at most 128 characters. Keys and configs "
                      "come from kernels' parameter names (FlyDSL's and Triton's); ASCII so that every shell "
                      "and command line can type them as NAME=VALUE."),
]
Token = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+:-]{0,63}$")]
Text = Annotated[str, StringConstraints(min_length=1, max_length=512)]
LongText = Annotated[str, StringConstraints(max_length=16384)]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Version = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,4}\.[0-9]{1,4}$")]
SchemaVersion = Annotated[str, StringConstraints(pattern=r"^1\.[0-9]{1,4}$")]
"""A ``schema_version`` this reader takes: major 1, any minor."""
Timestamp = Annotated[
    str, StringConstraints(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z$")
]
Count = Annotated[StrictInt, Field(ge=0, le=2**53)]
Positive = Annotated[StrictInt, Field(ge=1, le=2**53)]
Micros = Annotated[float, Field(gt=0.0, le=1e12)]

_Int = Annotated[
    StrictInt,
    Field(ge=-(2**63), le=2**63 - 1,
          description="A 64-bit signed integer: kernels take sizes as 64-bit ints, and readers in other languages "
                      "parse JSON integers into them."),
]


def _not_an_int(value: object) -> object:
    # Without this an integer beyond 64 bits would become a float silently, losing digits.
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError("an integer outside the 64-bit signed range")
    return value


_Float = Annotated[
    float, BeforeValidator(_not_an_int),
    Field(allow_inf_nan=False, description="A finite number (JSON has no NaN or Infinity)."),
]
_String = Annotated[
    str, StringConstraints(max_length=1024),
    Field(description="At most 1024 characters, so that one value cannot make a key or config unbounded."),
]
_Member = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Scalar = Union[StrictBool, _Int, _Float, _String, None]
"""A value that is not a container: bool, int, finite float, string or null."""
_Inner = Union[
    Scalar,
    Annotated[list[Scalar], Field(max_length=256)],
    Annotated[dict[_Member, Scalar], Field(max_length=256)],
]
Value = Union[
    Scalar,
    Annotated[list[_Inner], Field(max_length=256,
                                  description="Lists and objects nest at most two deep (a list of tensor shapes), "
                                              "so a reader can bound the depth of every document.")],
    Annotated[dict[_Member, _Inner], Field(max_length=256)],
]
"""A key or config value (schema 1.1): a scalar, or a list or object of scalars or of
lists and objects of scalars.  What each axis or tunable takes is the kernel's to say
(its declaration, and ``flyconfigs schema --kernel NAME``)."""
Key = Annotated[
    dict[AxisName, Value],
    Field(min_length=1, max_length=64, description="At most 64 axes: a key is what a kernel's config depends on."),
]
"""A kernel's key: its declared axes with typed values, e.g. ``{"M": 4096, "dtype": "bf16"}``."""
Config = Annotated[
    dict[AxisName, Value],
    Field(max_length=256, description="At most 256 tunables: a config is one point of a kernel's tuning space."),
]
"""A kernel configuration: tunable names and their values."""

Vendor = Literal["amd", "nvidia", "intel"]
"""``intel`` (1.6): Intel GPUs, named by their oneAPI device architecture (``intel_gpu_bmg_g31``)."""
CandidateStatus = Literal["ok", "compiled", "compile_error", "launch_error", "wrong_result", "timeout", "skipped"]
"""``compiled`` (1.1): compiled for the device and within its budgets, never run or timed."""


def _is_none(value: object) -> bool:
    return value is None


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)


class KernelRef(_Model):
    """Which kernel was tuned: family name, family version, sha256 of its source
    (``None`` when imported from a format that does not record it)."""

    name: KernelName
    version: Positive
    source_sha256: Sha256 | None = None


class DeviceIdentity(_Model):
    """The part of a device descriptor that decides identity and matching.

    Resolution matches the whole identity first, then ``vendor``+``arch``+
    ``compute_units``, then ``vendor``+``arch`` (borrowed).
    """

    vendor: Vendor
    arch: Name
    product: Text
    compute_units: Positive
    features: Annotated[list[Token], Field(json_schema_extra={"uniqueItems": True})] = []

    def layers(self) -> tuple[tuple[object, ...], tuple[object, ...], tuple[object, ...]]:
        """Match tokens from most to least specific: exact, same CU count, same arch."""
        return (
            (self.vendor, self.arch, self.product, self.compute_units, tuple(self.features)),
            (self.vendor, self.arch, self.compute_units),
            (self.vendor, self.arch),
        )

    def describe(self) -> str:
        """One line for humans: ``sm90 'NVIDIA H200' 132 CUs``."""
        feats = f" [{' '.join(self.features)}]" if self.features else ""
        return f"{self.arch} {self.product!r} {self.compute_units} CUs{feats}"

    @model_validator(mode="after")
    def _features_sorted(self) -> DeviceIdentity:
        if list(self.features) != sorted(set(self.features)):
            raise ValueError("features: must be sorted and unique")
        return self


class Device(DeviceIdentity):
    """A full device descriptor: the identity plus what changes a winner and the
    software it ran under."""

    IDENTITY_FIELDS: ClassVar[tuple[str, ...]] = ("vendor", "arch", "product", "compute_units", "features")

    wave_size: Literal[32, 64]
    l2_bytes: Count | None = None
    memory_bandwidth_gbps: Annotated[float, Field(gt=0.0, le=1e6)] | None = None
    driver_version: Text | None = None
    runtime_version: Text | None = None
    ordinal: Count | None = None
    """The device index it was measured on, for hosts with several GPUs."""

    @property
    def identity(self) -> DeviceIdentity:
        """The identity part of this descriptor."""
        return DeviceIdentity(**{f: getattr(self, f) for f in self.IDENTITY_FIELDS})


class Timing(_Model):
    """Statistics of one candidate's timed samples, in microseconds per call."""

    median_us: Micros
    p20_us: Micros
    p80_us: Micros
    min_us: Micros
    samples: Positive
    bandwidth_gbps: Annotated[float, Field(ge=0.0, le=1e6)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Timing:
        if not (self.min_us <= self.p20_us <= self.median_us <= self.p80_us):
            raise ValueError("p20_us: expected min_us <= p20_us <= median_us <= p80_us")
        return self

    @property
    def noise(self) -> float:
        """Relative half-width of the p20–p80 band around the median."""
        return (self.p80_us - self.p20_us) / (2.0 * self.median_us)


class Resources(_Model):
    """What a compiled variant uses, read from its code object."""

    registers: Count | None = None
    spill_bytes: Count | None = None
    shared_bytes: Count | None = None
    max_blocks_per_cu: Count | None = None
    occupancy: Annotated[float, Field(ge=0.0, le=1.0)] | None = None


class Candidate(_Model):
    """One configuration the tuner tried and what happened to it.

    Only ``ok`` candidates carry a timing.  ``compiled`` ones (1.1) were compiled and
    checked against the device's budgets but never run; they may carry the cost
    model's ``predicted_us``.  Every other status carries a message saying why.
    """

    model_config = ConfigDict(
        strict=True, frozen=True, extra="forbid", allow_inf_nan=False,
        json_schema_extra={
            "allOf": [
                {"if": {"properties": {"status": {"enum": ["ok", "compiled"]}}},
                 "else": {"required": ["message"],
                          "properties": {"message": {"type": "string", "minLength": 1}, "timing": {"type": "null"},
                                         "timed_in": {"type": "null"}}}},
                {"if": {"properties": {"status": {"const": "compiled"}}},
                 "then": {"properties": {"timing": {"type": "null"}, "timed_in": {"type": "null"}}}},
                {"if": {"properties": {"status": {"const": "ok"}}},
                 "then": {"properties": {"predicted_us": {"type": "null"}}}},
            ],
        },
    )

    config: Config
    status: CandidateStatus
    message: LongText | None = None
    timing: Timing | None = None
    resources: Resources | None = None
    predicted_us: Annotated[Micros | None, Field(exclude_if=_is_none)] = None
    """What the cost model predicts per call (1.1; only on ``compiled`` candidates)."""
    timed_in: Annotated[Literal["screen", "final"] | None, Field(exclude_if=_is_none)] = None
    """Which protocol ``timing`` comes from (1.2): ``final``, the artifact's
    ``timing_protocol``, or ``screen``, its brief ``timing_protocol.screen``.  Timings of
    the two are not comparable with each other; ``None`` where the maker did not say."""

    @model_validator(mode="after")
    def _status_fits(self) -> Candidate:
        if self.status != "ok" and self.timing is not None:
            raise ValueError(f"timing: a {self.status!r} candidate cannot have a timing")
        if self.timed_in is not None and self.timing is None:
            raise ValueError("timed_in: only a candidate with a timing says where it was timed")
        if self.status not in ("ok", "compiled") and not self.message:
            raise ValueError(f"message: a {self.status!r} candidate needs a message saying why")
        if self.status == "ok" and self.predicted_us is not None:
            raise ValueError("predicted_us: a measured ('ok') candidate carries its timing, not a prediction")
        return self


class Choice(_Model):
    """A chosen configuration and, when it was measured, its timing."""

    config: Config
    timing: Timing | None = None


class Selection(_Model):
    """How the winner was chosen.

    ``beat-default-beyond-noise``: measured; the fastest candidate wins only when it
    beats the default by more than ``noise_band`` (relative); otherwise the default is
    kept (``kept_default``).  ``predicted`` (1.1): ranked by a cost model from compiled
    resources, never run on the device (``provenance.model`` names the model).
    ``imported``: brought in from another format, not measured here.
    """

    rule: Literal["beat-default-beyond-noise", "predicted", "imported"]
    noise_band: Annotated[float, Field(ge=0.0, le=10.0)] | None = None
    remeasured: bool = False
    kept_default: bool = False

    @property
    def measured(self) -> bool:
        """Whether the winner was timed on the device."""
        return self.rule == "beat-default-beyond-noise"


class ModelRef(_Model):
    """The cost model that ranked a ``predicted`` artifact's candidates (1.1)."""

    name: KernelName
    version: Positive


class ScreenProtocol(_Model):
    """The brief timing every checked candidate had before the finalists were chosen (1.2).

    Candidates were timed in interleaved groups of at most ``group_size``, the default in
    each, and ranked by their median over the default's in their group; the
    ``finalists`` best and the default were then timed under the artifact's protocol.
    """

    launches_per_sample: Positive
    warmup: Count
    samples: Positive
    group_size: Annotated[StrictInt, Field(ge=2, le=4096)]
    finalists: Positive


class TimingProtocol(_Model):
    """How samples were taken (see flyconfigs.tuner.timing): the winner's and the
    default's timings, and those of candidates ``timed_in`` ``final``."""

    method: Literal["graph-replay", "events"]
    launches_per_sample: Positive
    warmup: Count
    samples: Positive
    rotate_bytes: Count
    interleaved: bool
    screen: Annotated[ScreenProtocol | None, Field(exclude_if=_is_none)] = None
    """How the candidates ``timed_in`` ``screen`` were timed (1.2)."""
    held: Annotated[StrictBool | None, Field(exclude_if=_is_none)] = None
    """Whether the sampled replays, the screen's too, were queued behind a spin kernel
    that kept the device busy until the host had queued them all (1.3): ``true``, each
    sample is the device's time alone; ``false``, a sample also counts the host's
    submission latency whenever a replay reached the stream after its start event, which
    flattens short calls.  ``None``: not recorded (files made before 1.3, imports)."""


class Source(_Model):
    """Where an ``imported`` artifact's winner came from (1.4): the upstream project and
    file that ship it, the entry of that file, the revision as recorded by whoever
    imported it, and how the device descriptor was derived (a file name, a column), since
    such files name a device only in part.  ``reported`` holds the figures the upstream
    file states beside the config (aiter's ``us``, ``tflops``): measured by the upstream
    under its own protocol, never by flyconfigs, so they are not a :class:`Timing`."""

    project: Text
    """The upstream project, e.g. ``vllm-project/vllm``."""
    file: Text
    """The file's path in the upstream project (or its name, where the path is not known)."""
    entry: Text | None = None
    """Which part of the file: a JSON member (``"64"``), a CSV line (``line 12``)."""
    revision: Text | None = None
    """The upstream revision the file was taken from (a commit, a tag), as recorded."""
    url: Text | None = None
    device_from: Text
    """How ``device`` was derived from what the file states."""
    reported: Annotated[dict[AxisName, Scalar], Field(max_length=64)] = {}


class Provenance(_Model):
    """Who made the artifact, with what, where and when."""

    tool: Text
    backend: Name
    backend_versions: Annotated[dict[Name, Text], Field(max_length=32)] = {}
    compile_options: Annotated[list[Text], Field(max_length=64)] = []
    timing_protocol: TimingProtocol | None = None
    host: Text | None = None
    created: Timestamp | None = None
    """UTC time of the run; ``None`` when the source format does not record it."""
    git_revision: Text | None = None
    command: Annotated[list[LongText], Field(max_length=256)] = []
    model: Annotated[ModelRef | None, Field(exclude_if=_is_none)] = None
    """The cost model of a ``predicted`` selection (1.1)."""
    source: Annotated[Source | None, Field(exclude_if=_is_none)] = None
    """The upstream file an ``imported`` selection came from (1.4)."""


class Artifact(_Model):
    """A tuning artifact: one kernel × one device × one key."""

    schema_version: SchemaVersion
    kernel: KernelRef
    device: Device
    key: Key
    candidates: Annotated[list[Candidate], Field(min_length=1, max_length=4096)]
    winner: Choice
    default: Choice | None = None
    selection: Selection
    provenance: Provenance
    _measured: Any = PrivateAttr(default=None)
    """Where the candidates of an artifact served from a pack are (1.7): see
    :func:`flyconfigs.schema.pack.candidates_of`, the one way to read candidates."""

    @model_validator(mode="after")
    def _winner_was_tried(self) -> Artifact:
        chosen = "compiled" if self.selection.rule == "predicted" else "ok"
        if not any(c.status == chosen and same_value(c.config, self.winner.config) for c in self.candidates):
            raise ValueError(f"winner.config: must be one of the candidates with status {chosen!r}")
        if self.default is not None and not any(same_value(c.config, self.default.config) for c in self.candidates):
            raise ValueError("default.config: must be one of the candidates")
        if self.selection.rule == "predicted":
            if self.provenance.model is None:
                raise ValueError("provenance.model: a predicted selection names the model that ranked it")
            if self.winner.timing is not None or any(c.status == "ok" for c in self.candidates):
                raise ValueError("selection.rule: a predicted artifact has no measured candidate or winner timing")
        elif any(c.status == "compiled" for c in self.candidates):
            raise ValueError("candidates: 'compiled' (never timed) candidates belong to a predicted selection only")
        if self.provenance.source is not None and self.selection.rule != "imported":
            raise ValueError("provenance.source: only an imported selection names an upstream source")
        self._timed_in_fits()
        return self

    def _timed_in_fits(self) -> None:
        """A candidate's ``timed_in`` names a protocol the artifact records, its sample
        count is that protocol's, and the winner and the default were timed in the final."""
        protocol = self.provenance.timing_protocol
        chosen = [self.winner.config] + ([self.default.config] if self.default is not None else [])
        for i, c in enumerate(self.candidates):
            if c.timed_in is None or c.timing is None:
                continue
            where = f"candidates[{i}].timed_in"
            if protocol is None:
                raise ValueError(f"{where}: needs provenance.timing_protocol")
            stage = protocol if c.timed_in == "final" else protocol.screen
            if stage is None:
                raise ValueError(f"{where}: 'screen' needs provenance.timing_protocol.screen")
            if c.timing.samples != stage.samples:
                raise ValueError(f"{where}: {c.timing.samples} samples, but the {c.timed_in} protocol takes "
                                 f"{stage.samples}")
            if c.timed_in == "screen" and any(same_value(c.config, chosen_config) for chosen_config in chosen):
                raise ValueError(f"{where}: the winner and the default are timed in the final, not the screen")

    def identity(self) -> dict[str, object]:
        """What makes two artifacts "the same slot": kernel name, device identity, key."""
        return {
            "kernel": self.kernel.name,
            "device": self.device.identity.model_dump(mode="json"),
            "key": dict(self.key),
        }

    @property
    def from_test_double(self) -> bool:
        """Whether a test double (the simulated backend) made this artifact."""
        return self.provenance.backend in TEST_BACKENDS or self.device.product == TEST_DEVICE_PRODUCT

    def file_name(self) -> str:
        """``<kernel>-<arch>-<16 hex of the identity's hash>.json``: stable, file-name safe."""
        return artifact_file_name(self.kernel.name, self.device.identity, self.key)

    def to_json_bytes(self) -> bytes:
        """The canonical JSON of this artifact plus a final newline (what is written)."""
        return canonical_bytes(self.model_dump(mode="json")) + b"\n"

    def content_hash(self) -> str:
        """sha256 of the canonical JSON (without the final newline)."""
        return sha256_hex(canonical_bytes(self.model_dump(mode="json")))


def wave_size_of_arch(arch: str) -> int:
    """The wave (warp) size code for ``arch`` is built for: 64 on AMD GCN and CDNA
    (gfx6 to gfx9), 32 on RDNA (gfx10 and later, whose default mode is wave 32) and on
    NVIDIA.  The one place this rule is written."""
    if arch.startswith("gfx"):
        match = GFX_ARCH.match(arch)
        if match is None:
            raise ValueError(f"{arch!r} is not an AMD gfx arch (gfx, a decimal major, then two hex digits)")
        return 64 if int(match.group(1)) <= 9 else 32
    return 32


GFX_ARCH = re.compile(r"^gfx([0-9]{1,2})[0-9a-f]{2}$")
"""An AMD arch as LLVM names it: ``gfx``, the major version in decimal (``9``, ``10``,
``12``), then the minor version and the stepping, one hex digit each (``gfx90a``,
``gfx942``, ``gfx1100``).  ``gfxa42`` or ``gfx1a00`` is none."""


def artifact_file_name(kernel: str, device: DeviceIdentity, key: Mapping[str, object]) -> str:
    """The file name of the artifact for ``kernel`` on ``device`` at ``key``."""
    identity = {"kernel": kernel, "device": device.model_dump(mode="json"), "key": dict(key)}
    # A kernel name may start with "." (FlyDSL allows it); a file name never does, so
    # that no reader takes the artifact for a hidden or temporary file.
    return f"{kernel.lstrip('.')}-{device.arch}-{sha256_hex(canonical_bytes(identity))[:16]}.json"


_SAFE_FILE = re.compile(r"^[A-Za-z0-9_.-]+$")


def is_safe_file_name(name: str) -> bool:
    """True when ``name`` is one path segment of safe characters, not ``.`` or ``..``."""
    return bool(_SAFE_FILE.match(name)) and name not in (".", "..")
