"""An aiter config family, declared as data: one column layout of aiter's tuned CSVs
(which columns are the key, which the config, which the measurements) and the lookup
rule aiter applies to it.  :mod:`flyconfigs.kernels.aiter_gemm` declares every family.

aiter keys a tuned row by ``(gfx, cu_num, shape…)`` and matches the running GPU exactly
on both: here ``gfx`` is the device's arch and ``cu_num`` a key axis (exact), so a row
tuned for an 80-CU MI308X is never served to a 304-CU MI300X, even as a same-arch
neighbour.  The shape columns are the other key axes; aiter's lookup on a miss is the
family's :attr:`~AiterFamily.rule`:

- ``gemm`` (``get_CKGEMM_config``, ``get_GEMM_config_with_quant_type``, ``get_GEMM_config``
  of a4w4, ``get_GEMM_A16W16_config``, ``lookup_mxscale_bmm_config``): the exact ``M``,
  then ``M`` padded up at the fine granularity, then at the coarse one
  (``getPaddedM`` of ``csrc/py_itfs_cu/gemm_common.cu``, restated in :func:`padded_m`),
  else no config (aiter's default path);
- ``batched-gemm`` (the CK batched GEMMs, looked up in C++ by ``batched_rowwise_dispatch``
  of ``csrc/ck_batched_gemm_a8w8/batched_gemm_a8w8.cu`` and ``batched_dispatch`` of
  ``csrc/ck_batched_gemm_bf16/batched_gemm_bf16.cu``; the Python lookup only feeds
  ``splitK``, which the C++ entry ignores): the exact ``M``, then one padded ``M``
  (:func:`batched_padded_m`), else aiter's heuristic (no config here);
- ``nearest`` (the FlyDSL GEMM tile lookup, ``get_flydsl_gemm_config`` of
  ``aiter/ops/flydsl/gemm_tune/flydsl_gemm_config.py``): the exact ``M``, else the tuned
  ``M`` nearest by absolute difference, of two equally near the smaller;
- ``moe`` (``get_2stage_cfgs``): the token count padded (``get_padded_M``: the next power
  of two below 32768, then the tiers 32768 and 131072), then, above the first tier, the
  smaller tier;
- ``moe-exact`` (the dedicated FHMoE and the gfx1250 grouped MoE configs): the padded
  token count only;
- ``exact``: the key as it is.

At each of those a family may retry without some key columns, its
:attr:`~AiterFamily.retried` columns: the fused MoE with any ``act_type`` (the first row
of aiter's merged file), the grouped MoE with any ``cu_num`` (the lowest ``us``); and the
grouped MoE never compares its :attr:`~AiterFamily.unmatched` columns.

The default config is the empty one: a resolution that falls back (``source ==
"default"``) means "no tuned config: let aiter take its own default path".
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from flyconfigs.errors import InvalidKeyError
from flyconfigs.registry.plugin import DeviceQuery, KernelDecl, KeyAxis, KeyValue, SpelledKey, normalize_key
from flyconfigs.schema.canonical import canonical_text

if TYPE_CHECKING:
    from flyconfigs.registry.plugin import Tie

__all__ = ["COLUMN_TYPES", "MEASURED", "PUBLISHED_TARGETS", "RULES", "AiterFamily", "batched_padded_m", "moe_padded_token",
           "padded_m"]

Rule = Literal["gemm", "batched-gemm", "nearest", "moe", "moe-exact", "exact"]
RULES: tuple[Rule, ...] = ("gemm", "batched-gemm", "nearest", "moe", "moe-exact", "exact")
"""Every lookup rule of aiter's that a family may declare (module docstring)."""

_INTS = ("cu_num M N K B b m n k token model_dim inter_dim expert topk use_g1u1 doweight_stage1 shared_expert_id "
         "hidden_pad intermediate_pad H Hg V BT T_flat total_chunks max_seq_chunks sq num_k_heads num_v_heads "
         "head_k_dim head_v_dim")
_BOOLS = "bias scaleAB bpreshuffle is_varlen use_h0 store_fs snapshot_bf16 state_bf16 use_g use_gk save_vn wu_contig"
COLUMN_TYPES: dict[str, type] = {**dict.fromkeys(_INTS.split(), int), **dict.fromkeys(_BOOLS.split(), bool)}
"""The type of each key column aiter's lookups compare (pandas reads ints and ``True``/
``False``; every other key column is text, such as ``torch.bfloat16``)."""

_EXAMPLE_VALUES = {"cu_num": "304", "M": "128", "N": "8192", "K": "1024", "B": "16", "m": "128", "n": "8192",
                   "k": "1024", "b": "16", "q_dtype_w": "torch.float8_e4m3fnuz", "dtype": "torch.bfloat16",
                   "outdtype": "torch.bfloat16", "token": "128", "act_type": "ActivationType.Silu",
                   "q_type": "QuantType.per_Token", "q_dtype_a": "torch.float8_e4m3fnuz"}
_TYPE_EXAMPLES = {int: "1", bool: "False", str: "torch.bfloat16"}
_TYPE_NAMES = {int: "an int, as aiter's CSV writes it", bool: "True or False",
               str: "the text of aiter's CSV column (such as torch.bfloat16)"}

MEASURED = frozenset("us us1 us2 tflops bw errRatio err_ratio err1 err2 duration".split())
"""The columns that report what aiter's tuner measured, never part of a config."""

FALLBACK_AXIS = "flydsl_fallback"
"""A key axis of the MoE families: whether the row's ``_tag`` is ``flydsl_fallback``,
rows aiter drops before its lookup (they are kept, and served only to one who asks)."""


def padded_m(m: int, n: int, k: int, level: int) -> int:
    """aiter's ``getPaddedM(M, N, K, gl)``: level 0 pads ``M`` up to a multiple of 16
    (``M <= 256``), 32 (``<= 1024``), 64 (``<= 4096``) or 128; level 1 to the next
    power of two, or to 8192 when ``M > 8192`` and ``N > 4096``."""
    if level == 0:
        step = 16 if m <= 256 else 32 if m <= 1024 else 64 if m <= 4096 else 128
        return (m + step - 1) // step * step
    if m > 8192 and n > 4096:
        return 8192
    return _next_pow2(m)


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def batched_padded_m(m: int) -> int:
    """The ``M`` the CK batched GEMMs' C++ dispatch looks up second: 16 for ``1 < M <= 16``,
    the next power of two up to 16384, 20480 up to 20480, else ``M`` itself."""
    if 1 < m <= 16:
        return 16
    if m <= 16384:
        return _next_pow2(m)
    return 20480 if m <= 20480 else m


MOE_TIERS = (32768, 131072)


def moe_padded_token(token: int) -> int:
    """aiter's ``get_padded_M`` of ``fused_moe.py``: the next power of two below 32768,
    else the largest tier (32768, 131072) not above it."""
    if token < MOE_TIERS[0]:
        return _next_pow2(token)
    return max(t for t in MOE_TIERS if token >= t)


PUBLISHED_TARGETS = ("gfx1250", "gfx942", "gfx950")
"""The targets of the aiter packages this project publishes (``imported/aiter-<target>``;
a test keeps the two in step)."""


@dataclass(frozen=True)
class AiterFamily(KernelDecl):
    """One aiter config family (a :class:`~flyconfigs.registry.KernelDecl`).

    ``stems`` are the tuned-file names aiter reads for it (``a8w8_tuned_gemm``: the
    default file ``aiter/configs/a8w8_tuned_gemm.csv`` and every
    ``aiter/configs/model_configs/*a8w8_tuned_gemm*.csv``, as ``get_config_file`` globs),
    ``env`` the ``AITER_CONFIG_*`` variable that points aiter at one, ``key`` the key
    columns aiter's lookup compares (``gfx`` aside, which is the device), ``config`` every
    other column that may appear (the lookup returns the row), ``rule`` the lookup on a
    miss (module docstring)."""

    family: str
    stems: tuple[str, ...]
    env: str | None
    key: tuple[str, ...]
    config: tuple[str, ...]
    rule: Rule = "exact"
    arch_column: str = "gfx"
    on_duplicate: Literal["refuse", "lowest-us"] = "refuse"
    """Two rows of one device and key: aiter's lookup cannot tell them apart (the later
    is refused), or it serves the one of the lowest ``us`` (the other is refused as never served)."""
    retried: tuple[str, ...] = ()
    """The key columns aiter's lookup retries without when no row has the asked key
    (``fmoe``: ``act_type``; the grouped MoE: ``cu_num``): a row that differs from the
    asked key on them serves after the asked key's own row and before the next padding
    tier, of several such rows the first of aiter's merged file (``refuse``) or the lowest
    ``us`` (``lowest-us``, :meth:`tie_rank`)."""
    unmatched: tuple[str, ...] = ()
    """Key columns aiter's lookup never compares (the grouped MoE: ``use_g1u1``,
    ``doweight_stage1``): a row of any value of them matches, as near as one of the asked
    value (a nearest-key match all the same: the row was tuned for its own)."""
    opus_activations: tuple[str, ...] | None = None
    """The activations aiter runs an Opus stage-1 kernel for (``get_2stage_cfgs``): a
    row whose ``kernelName1`` begins with ``opus_`` is discarded for any other; ``None``:
    no such rule."""
    version: int = 2
    summary: str = ""
    measured: tuple[str, ...] = ()
    """Columns that report what the tuner measured besides :data:`MEASURED` (a family
    declared from data names its own)."""
    column_types: tuple[tuple[str, str], ...] = ()
    """Key columns typed otherwise than :data:`COLUMN_TYPES` says, as ``(column, "int" |
    "bool" | "str")`` pairs (a family declared from data)."""

    def type_of(self, column: str) -> type:
        """The type of key column ``column`` as aiter's lookup compares it."""
        own = dict(self.column_types).get(column)
        return {"int": int, "bool": bool, "str": str}[own] if own is not None else COLUMN_TYPES.get(column, str)

    @property
    def measured_columns(self) -> frozenset[str]:
        """Every column that reports a measurement, never part of a config."""
        return MEASURED | frozenset(self.measured)

    def __post_init__(self) -> None:
        stray = [c for c in self.relaxed_axes if c not in self.key or c == self.ordinal_axis]
        if stray:
            raise ValueError(f"{self.name}: retried or unmatched columns {stray} are not exact key columns of {self.key}")

    @property
    def relaxed_axes(self) -> tuple[str, ...]:
        """The key columns a row may differ on from the asked key: :attr:`retried` and
        :attr:`unmatched` (the contract member the nearest-key step reads)."""
        return (*self.retried, *self.unmatched)

    @property
    def data_packages(self) -> frozenset[str]:
        """The packages this project publishes of aiter's tuned files
        (``flyconfigs-aiter-<target>``, from ``imported/aiter-<target>``): they rank as
        the family owner's, above a third party's (:data:`PUBLISHED_TARGETS`)."""
        return frozenset(f"flyconfigs-aiter-{target}" for target in PUBLISHED_TARGETS)

    @property
    def name(self) -> str:
        """``aiter_<family>``."""
        return f"aiter_{self.family}"

    @property
    def ordinal_axis(self) -> str | None:
        """The axis the rule pads (``M``, ``m`` or ``token``), if any."""
        if self.rule in ("gemm", "batched-gemm", "nearest"):
            return "m" if "m" in self.key else "M"
        return "token" if self.rule in ("moe", "moe-exact") else None

    @functools.cached_property
    def key_axes(self) -> tuple[KeyAxis, ...]:
        """The key columns, typed; the padded axis ordinal; the MoE families' ``flydsl_fallback``
        (made once: every key checked reads them)."""
        axes = tuple(KeyAxis(c, self.type_of(c), ordinal=c == self.ordinal_axis,
                             minimum=1 if c == self.ordinal_axis else None) for c in self.key)
        return axes + ((KeyAxis(FALLBACK_AXIS, bool),) if self.rule == "moe" else ())

    def spelled_key(self, key: Mapping[str, object], device: DeviceQuery | None) -> SpelledKey:
        """``key`` as aiter's CSV columns spell it: ``cu_num`` left out is the device's
        CU count (filled in, where the device is known), the arch column (``gfx`` or
        ``arch``) must be the device's arch (it names the device when none is asked
        for), a bool column may be written ``True``/``False`` as in the CSV, and a MoE
        family's ``flydsl_fallback`` left out is false (filled in).  A column the family
        does not key by is refused, naming the key columns and an example."""
        out = dict(key)
        filled: dict[str, KeyValue] = {}
        named: str | None = None
        arch = out.pop(self.arch_column, None) if self.arch_column in out else None
        if arch is not None:
            if not isinstance(arch, str) or (device is not None and arch != device.arch):
                raise self._key_error(self.arch_column, f"{arch!r} is not the device's arch "
                                      f"({device.describe() if device is not None else '?'})",
                                      "the arch aiter's rows are tuned for, that of the device asked for")
            named = arch if device is None else None
        for name, value in out.items():
            if name in self.key and self.type_of(name) is bool and value in ("True", "False"):
                out[name] = value == "True"
        if "cu_num" in self.key and "cu_num" not in out and device is not None and device.compute_units is not None:
            out["cu_num"] = filled["cu_num"] = device.compute_units
        if self.rule == "moe" and FALLBACK_AXIS not in out:
            out[FALLBACK_AXIS] = filled[FALLBACK_AXIS] = False
        unknown = [c for c in out if c not in self.key and c != FALLBACK_AXIS]
        if unknown:
            raise self._key_error(unknown[0], f"is not a key column of {self.name}", "its key columns: "
                                  + ", ".join((self.arch_column, *self.key)))
        return SpelledKey(out, filled, named)

    def _key_error(self, axis: str, problem: str, accepts: str) -> InvalidKeyError:
        return InvalidKeyError(f"key axis {axis!r} of {self.name!r}: {problem}; it takes {accepts}, "
                               f"e.g. {self.example()}")

    def example(self) -> str:
        """A whole key of the family as aiter's columns spell it, for error messages."""
        return " ".join(f"{c}={_EXAMPLE_VALUES.get(c, _TYPE_EXAMPLES[self.type_of(c)])}" for c in self.key)

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` typed against the axes (``InvalidKeyError`` naming a missing axis, what
        it takes and an example); a MoE family's token is padded as aiter pads it before
        its lookup, and ``flydsl_fallback`` defaults to false."""
        given = dict(key)
        if self.rule == "moe":
            given.setdefault(FALLBACK_AXIS, False)
        missing = [c for c in self.key if c not in given]
        if missing:
            what = ("the GPU's CU count (304 on an MI300X; filled in from the device when one is known, "
                    "as with --device MI300X)") if missing[0] == "cu_num" else _TYPE_NAMES[self.type_of(missing[0])]
            raise self._key_error(missing[0], "is missing", what)
        checked = normalize_key(self, given)
        token = checked.get("token")
        if self.rule in ("moe", "moe-exact") and type(token) is int and token > 0:
            checked["token"] = moe_padded_token(token)
        return checked

    def key_distance(self, asked: Mapping[str, KeyValue], tuned: Mapping[str, KeyValue]) -> tuple[float, ...] | None:
        """aiter's lookup on a miss (module docstring): ``(level,)``, 0 for the asked key,
        1 and 2 for the fine and coarse padding (``gemm``), 1 for the padded ``M``
        (``batched-gemm``) or for the smaller MoE tier; ``(|M - m|, m)`` for ``nearest``
        (of two equally near ``m``, the smaller);
        ``None`` where aiter takes its default path.  A family with
        :attr:`relaxed_axes` answers ``(level, retried)``: ``retried`` is 1 for a row
        that differs from the asked key on a :attr:`retried` column (aiter's retry without
        them, tried at each level after the asked key itself), 0 for one that differs on
        :attr:`unmatched` columns only."""
        if self.rule == "nearest":
            axis = self.ordinal_axis or "M"
            a, t = asked.get(axis), tuned.get(axis)
            return (float(abs(a - t)), float(t)) if type(a) is int and type(t) is int else None
        level = self._level(asked, tuned)
        if level is None or not self.relaxed_axes:
            return level
        retried = any(canonical_text(asked.get(c)) != canonical_text(tuned.get(c)) for c in self.retried)
        return (*level, 1.0 if retried else 0.0)

    def _level(self, asked: Mapping[str, KeyValue], tuned: Mapping[str, KeyValue]) -> tuple[float, ...] | None:
        axis = self.ordinal_axis
        if axis is None:
            same = all(canonical_text(asked.get(c)) == canonical_text(tuned.get(c))
                       for c in asked if c not in self.relaxed_axes)
            return (0.0,) if same else None
        a, t = asked.get(axis), tuned.get(axis)
        if type(a) is not int or type(t) is not int:
            return None
        if a == t:
            return (0.0,)
        if self.rule == "gemm":
            n, k = (asked.get("n"), asked.get("k")) if axis == "m" else (asked.get("N"), asked.get("K"))
            if type(n) is not int or type(k) is not int:
                return None
            for level in (0, 1):
                if t == padded_m(a, n, k, level):
                    return (float(level + 1),)
            return None
        if self.rule == "batched-gemm" and a != batched_padded_m(a) and t == batched_padded_m(a):
            return (1.0,)
        if self.rule == "moe" and a > MOE_TIERS[0] and t == MOE_TIERS[0]:
            return (1.0,)
        return None

    def tie_rank(self, asked: Mapping[str, KeyValue], tie: Tie) -> tuple[float, ...]:
        """Of several rows at one level, the asked key's own row (and those differing
        from it on :attr:`unmatched` columns only) before a retried one (the rest of
        :meth:`key_distance`), then the one aiter's retry takes first: the lowest ``us``
        (``lowest-us``: ``_find_grouped_config`` sorts its matches by ``us``), else the
        first of aiter's merged file, which begins with the default file
        (``aiter/configs/<stem>.csv``; ``get_2stage_cfgs`` keeps the first row of each
        key without the relaxed columns).  Ties keep the sources' order: a file's line
        order (aiter's order among the per-model files is the folder listing's).  A row
        whose artifact cannot be read goes last; a family without :attr:`relaxed_axes`
        keeps the default order (and reads nothing)."""
        if not self.relaxed_axes:
            return ()
        artifact = tie.artifact
        if artifact is None:
            return (*tie.distance[1:], math.inf)
        source = artifact.provenance.source
        if self.on_duplicate == "lowest-us":
            us = source.reported.get("us") if source is not None else None
            # aiter sorts by float(us or 0.0): a row without a time comes first.
            return (*tie.distance[1:], float(us) if isinstance(us, (int, float)) and not isinstance(us, bool) else 0.0)
        default = source is not None and source.file in {f"aiter/configs/{stem}.csv" for stem in self.stems}
        return (*tie.distance[1:], 0.0 if default else 1.0)

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
        """``None`` when ``config`` names some of the family's config columns and no
        other, each a scalar, and aiter would not discard it for ``key`` (an Opus stage-1 kernel for an
        activation it does not run, :attr:`opus_activations`)."""
        if not config:  # a key-only file's row: aiter finds the key and nothing to run
            return f"an empty config: no column of {', '.join(self.config)}, so nothing tuned to serve"
        unknown = sorted(set(map(str, config)) - set(self.config))
        if unknown:
            return f"not a {self.name} config: {', '.join(unknown)} (columns: {', '.join(self.config)})"
        for name, value in config.items():
            if value is not None and not isinstance(value, (bool, int, float, str)):
                return f"{name}={value!r} is not a scalar"
        if self.opus_activations is not None and str(config.get("kernelName1") or "").strip().startswith("opus_") \
                and key.get("act_type") not in self.opus_activations:
            return (f"aiter discards an Opus stage-1 kernel for {key.get('act_type')} (it runs one for "
                    f"{', '.join(self.opus_activations)} only)")
        return None

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The empty config: no tuned config, so the caller keeps aiter's default path."""
        return {}

    def reads(self, file_name: str) -> bool:
        """Whether aiter reads a file of this name for the family: ``*<stem>*.csv`` and not
        untuned, the glob of aiter's ``get_config_file``."""
        return file_name.endswith(".csv") and "untuned" not in file_name and any(
            stem in file_name.removesuffix(".csv") for stem in self.stems)

    def layout_problem(self, header: list[str]) -> str | None:
        """Why a CSV with ``header`` is not of this family's layout, or ``None``."""
        missing = [c for c in self.key if c not in header]
        known = {*self.key, *self.config, *self.measured_columns, self.arch_column, "cu_num"}
        extra = [c for c in header if c not in known]
        if missing or extra:
            return "; ".join(filter(None, (f"no column {', '.join(missing)}" if missing else "",
                                           f"columns {', '.join(extra)} are not of {self.name}" if extra else "")))
        return None


def cell_value(text: str) -> Any:
    """A config or measurement cell as pandas reads it: an int (of 64 bits), a float,
    ``True`` or ``False``, ``None`` for an empty cell, else the text (an integer beyond 64
    bits among them: its digits, exactly)."""
    if text == "":
        return None
    if re.fullmatch(r"-?[0-9]{1,1024}", text):
        whole = int(text)
        # pandas reads an int64 as an int; one beyond it is kept as its digits, which a
        # table's 64-bit cell cannot hold and a float would round.
        return whole if -(2**63) <= whole < 2**63 else text
    if text in ("True", "False"):
        return text == "True"
    if re.fullmatch(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", text):
        value = float(text)
        return value if value == value and abs(value) != float("inf") else text
    return text
