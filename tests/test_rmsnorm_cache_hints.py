"""RMSNorm's ``cache_hints`` tunable: ``stream`` exists only where the device takes L2
cache hints (NVIDIA sm80 and later), only where the space offers it (M ≤ 16), and a config published before the tunable keeps its meaning and its
compiler options."""

from __future__ import annotations

from flyconfigs.kernels.rmsnorm import SPEC, cache_hints_of
from flyconfigs.kernels.rmsnorm import default as rmsnorm_default
from flyconfigs.registry.checks.kernel_schema import config_schema
from flyconfigs.registry.declarations import check_config
from flyconfigs.registry.sources.device import DeviceQuery

H200 = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())
A100 = DeviceQuery("nvidia", "sm80", "NVIDIA A100", 108, ())
T4 = DeviceQuery("nvidia", "sm75", "Tesla T4", 40, ())
MI300X = DeviceQuery("amd", "gfx942", "AMD Instinct MI300X", 304, ())
FEW_ROWS = {"M": 16, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
MANY_ROWS = {"M": 65536, "N": 12288, "dtype": "bf16", "weight_dtype": "bf16"}
PLAIN = {"threads": 128, "rows_per_block": 1, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0, "cluster": 1}
STREAM = {**PLAIN, "cache_hints": "stream"}


def test_only_nvidia_sm80_and_later_take_cache_hints() -> None:
    assert [cache_hints_of(d) for d in (H200, A100, T4, MI300X, None)] == [True, True, False, False, False]
    assert SPEC.check_config(STREAM, FEW_ROWS, H200) is None
    for device in (T4, MI300X, None):
        why = SPEC.check_config(STREAM, FEW_ROWS, device)
        assert why is not None and "cache_hints='stream'" in why, device
        assert {c["cache_hints"] for c in SPEC.space(FEW_ROWS, device)} == {"none"}
    why = check_config(SPEC, {**PLAIN, "cache_hints": "evict"}, FEW_ROWS, H200)
    assert why is not None and "cache_hints='evict'" in why


def test_the_space_offers_stream_for_few_rows_only() -> None:
    few = SPEC.space(FEW_ROWS, H200)
    assert {c["cache_hints"] for c in few} == {"none", "stream"}
    plain = [{k: v for k, v in c.items() if k != "cache_hints"} for c in few if c["cache_hints"] == "none"]
    # Every streamed config has its plain twin in the space: the tuner times both.
    for config in few:
        if config["cache_hints"] == "stream":
            assert {k: v for k, v in config.items() if k != "cache_hints"} in plain
    for m in (17, 256, 65536):
        assert {c["cache_hints"] for c in SPEC.space({**MANY_ROWS, "M": m}, H200)} == {"none"}


def test_a_config_from_before_cache_hints_means_none_and_compiles_as_before() -> None:
    assert SPEC.check_config(PLAIN, FEW_ROWS, MI300X) is None
    assert SPEC.complete_config(PLAIN)["cache_hints"] == "none"
    before = SPEC.defines(PLAIN, FEW_ROWS, 32)
    assert SPEC.defines({**PLAIN, "cache_hints": "none"}, FEW_ROWS, 32) == before
    assert not any(d.startswith("-DFC_CACHE") for d in before)
    assert SPEC.defines(STREAM, FEW_ROWS, 32) == [*before, "-DFC_CACHE=7"]
    schema = config_schema(SPEC)
    assert schema is not None and "cache_hints" not in schema["required"]
    assert schema["properties"]["cache_hints"]["default"] == "none"


def test_the_learned_default_keeps_a_shapes_cache_hints() -> None:
    shape = rmsnorm_default.shape_of(STREAM, 4096, "bf16")
    assert shape[-1] == "stream"
    assert rmsnorm_default.config_of(shape, 4096, "bf16") == STREAM
    table = rmsnorm_default.decode(rmsnorm_default.encode(rmsnorm_default.DefaultTable(132, {
        ("bf16", "bf16", 16, 4096): {shape: 0.0}})))
    assert list(table.cells[("bf16", "bf16", 16, 4096)]) == [shape]
