"""aiter's tuned GEMMs, declared so that the configs aiter ships in its tuned CSVs can be
imported, published and served (flyconfigs neither runs nor tunes them).

aiter keeps one CSV per GEMM family (``aiter/configs/<family>_tuned_gemm.csv``, and per
model under ``aiter/configs/model_configs/``), one row per ``(gfx, cu_num, M, N, K[, …])``
with the chosen kernel (``libtype``, ``kernelId``, ``splitK``, ``kernelName``) and what
aiter measured (``us``, ``tflops``, ``bw``, ``errRatio``).  It looks a shape up exactly,
then with ``M`` padded up to a tuned one; here ``M`` is the ordinal axis and the rest are
exact.  Each family is its own kernel: :data:`FAMILIES` names the ones declared and the
columns each file has.

The default is the empty config: a resolution that falls back (``source == "default"``)
means "no imported config: let aiter take its own default path".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from flyconfigs.registry.declarations import KernelDecl, KeyAxis, KeyValue, normalize_key
from flyconfigs.registry.device import DeviceQuery

__all__ = ["A8W8_BLOCKSCALE", "A8W8_BPRESHUFFLE", "FAMILIES", "AiterGemmSpec"]


@dataclass(frozen=True)
class AiterGemmSpec(KernelDecl):
    """One aiter GEMM family (a :class:`~flyconfigs.registry.KernelDecl`): its key columns
    (``M`` first, typed), its config columns (typed) and the figures its rows report."""

    family: str
    key_columns: tuple[tuple[str, type], ...]
    config_columns: tuple[tuple[str, type], ...]
    reported_columns: tuple[str, ...] = ("us", "tflops", "bw", "errRatio")
    version: int = 1

    @property
    def name(self) -> str:
        """``aiter_gemm_<family>``."""
        return f"aiter_gemm_{self.family}"

    @property
    def key_axes(self) -> tuple[KeyAxis, ...]:
        """``M`` (ordinal) and the family's other key columns (exact)."""
        return tuple(KeyAxis(name, kind, ordinal=name == "M", minimum=1 if kind is int else None)
                     for name, kind in self.key_columns)

    def check_key(self, key: Mapping[str, object]) -> dict[str, KeyValue]:
        """``key`` validated against the axes (:class:`~flyconfigs.errors.InvalidKeyError`)."""
        return normalize_key(self, key)

    def check_config(self, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
        """``None`` when ``config`` sets exactly the family's config columns, each of its
        type (ints non-negative, names non-empty), else why not."""
        names = [name for name, _ in self.config_columns]
        if sorted(config) != sorted(names):
            return f"not a {self.name} config: expected {', '.join(names)}, got {', '.join(sorted(map(str, config)))}"
        for name, kind in self.config_columns:
            value = config[name]
            if type(value) is not kind:
                return f"{name}={value!r} is not {kind.__name__}"
            if isinstance(value, int) and value < 0:
                return f"{name}={value} is negative"
            if isinstance(value, str) and not value:
                return f"{name} is empty"
        return None

    def default_config(self, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> dict[str, KeyValue]:
        """The empty config: no imported config, so the caller keeps aiter's default path."""
        return {}


A8W8_BPRESHUFFLE = AiterGemmSpec(
    "a8w8_bpreshuffle",
    key_columns=(("M", int), ("N", int), ("K", int), ("q_dtype_w", str)),
    config_columns=(("libtype", str), ("kernelId", int), ("splitK", int), ("kernelName", str)),
)
"""aiter's int8/fp8 GEMM with pre-shuffled weights (``a8w8_bpreshuffle_tuned_gemm.csv``)."""

A8W8_BLOCKSCALE = AiterGemmSpec(
    "a8w8_blockscale",
    key_columns=(("M", int), ("N", int), ("K", int)),
    config_columns=(("libtype", str), ("kernelId", int), ("splitK", int), ("kernelName", str)),
)
"""aiter's fp8 GEMM with block scales (``a8w8_blockscale_tuned_gemm.csv`` and the models'
``a8w8_blockscale_tuned_gemm_<model>.csv``); aiter looks it up by ``M, N, K`` alone."""

FAMILIES: dict[str, AiterGemmSpec] = {spec.family: spec for spec in (A8W8_BPRESHUFFLE, A8W8_BLOCKSCALE)}
"""The aiter GEMM families declared, by the name their CSV files start with."""
