"""RMSNorm's validity rules are one statement: the declaration's check evaluates them and
the source asserts them (``static_assert``s put in from the same text), over quantities
the two compute alike; and a winner tuned for another row is adapted to fit one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flyconfigs.errors import BackendUnavailableError, CompileError
from flyconfigs.gpu import CompileRequest
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.kernels.rmsnorm.validity import MARKER, RULES, quantities
from flyconfigs.kernels.rownorm import source_text
from flyconfigs.registry import DeviceQuery

H200 = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())
MI300X = DeviceQuery("amd", "gfx942", "AMD Instinct MI300X", 304, ("sramecc+", "xnack-"))
CONFIG = {"threads": 64, "rows_per_block": 2, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0,
          "cluster": 1, "cache_hints": "none"}
BF16 = {"M": 4096, "N": 1024, "dtype": "bf16", "weight_dtype": "bf16"}


def test_the_source_asserts_exactly_the_asserted_rules_and_none_of_its_own() -> None:
    raw = source_text(SPEC.source_file)
    assert "static_assert(" not in raw and raw.count(MARKER) == 1
    built = SPEC.source()
    asserted = re.findall(r'static_assert\(.*, "([a-z0-9-]+): ', built)
    assert asserted == [r.name for r in RULES if r.asserted]
    assert {"vector-divides-row", "row-whole-waves", "cluster-within-row-lanes", "cluster-needs-sm90"} <= set(asserted)


def test_the_digest_covers_the_rules_put_into_the_source() -> None:
    import hashlib

    assert SPEC.source_sha256() == hashlib.sha256(SPEC.source().encode()).hexdigest()
    assert SPEC.source_sha256() != hashlib.sha256(source_text(SPEC.source_file).encode()).hexdigest()


def test_every_name_an_asserted_rule_reads_is_a_quantity_the_source_defines() -> None:
    raw = source_text(SPEC.source_file)
    defined = set(re.findall(r"constexpr int ([A-Z_]+) =", raw)) | set(re.findall(r"^\s+([A-Z_]+) = ", raw, re.M))
    read = set().union(*(r.names for r in RULES if r.asserted))
    assert read <= defined, read - defined
    assert read <= quantities(CONFIG, BF16, 32, 8, True).keys()


@pytest.mark.parametrize(("n", "adapted"), [
    (1024, None),  # fits as it is: nothing to adapt
    (1020, 8),     # 8 elements do not divide 1020, 4 do
    (1022, 4),
    (1001, 0),     # an odd row: the scalar path
])
def test_adapt_config_takes_the_widest_vector_that_divides_the_row(n: int, adapted: int | None) -> None:
    key = {**BF16, "N": n}
    out = SPEC.adapt_config(CONFIG, key, H200)
    if adapted is None:
        assert out is None and SPEC.check_config(CONFIG, key, H200) is None
    else:
        assert SPEC.check_config(CONFIG, key, H200) is not None
        assert out == {**CONFIG, "vector_bytes": adapted}
        assert SPEC.check_config(out, key, H200) is None


def test_adapt_config_gives_up_where_a_narrower_vector_does_not_help() -> None:
    # 256 threads for a row of 3 elements: no vector width makes that valid.
    assert SPEC.adapt_config({**CONFIG, "threads": 256, "rows_per_block": 1}, {**BF16, "N": 3}, H200) is None
    # A wave-32 block of 32 threads on a wave-64 device: not a vector question either.
    assert SPEC.adapt_config({**CONFIG, "threads": 32, "rows_per_block": 1}, {**BF16, "N": 1020}, MI300X) is None


def _nvrtc_backend(tmp_path: Path) -> object:
    from flyconfigs.gpu.backend import Backend
    from flyconfigs.gpu.cache import CompileCache
    from flyconfigs.gpu.cuda import CudaBinding

    try:
        binding = CudaBinding()
        binding.compiler_version()
    except (BackendUnavailableError, ImportError, RuntimeError) as exc:
        pytest.skip(f"NVRTC is not loadable here ({exc}); scripts/test.sh installs it")
    return Backend(binding, arch="sm90", cache=CompileCache(tmp_path / "cache"))


@pytest.mark.nvrtc
def test_the_source_computes_the_quantities_the_check_computes(tmp_path: Path) -> None:
    # Each variant is compiled with the check's value of every quantity an asserted rule
    # reads asserted equal to the source's own: the two derive them alike.
    backend = _nvrtc_backend(tmp_path)
    cases = [(CONFIG, BF16), ({**CONFIG, "vector_bytes": 0, "threads": 32}, {**BF16, "N": 1001}),
             ({**CONFIG, "vector_bytes": 8, "threads": 512, "rows_per_block": 1, "cluster": 4, "cache_hints": "stream"},
              {"M": 1, "N": 12288, "dtype": "fp32", "weight_dtype": "fp32"})]
    names = sorted(set().union(*(r.names for r in RULES if r.asserted)))
    requests = []
    for config, key in cases:
        assert SPEC.check_config(config, key, H200) is None
        values = quantities(config, key, 32, 8, True)
        probe = "".join(f'static_assert(fc::{n} == {values[n]}, "{n}");\n' for n in names)
        base = SPEC.build(config, key, H200)
        requests.append(CompileRequest(base.source + "\n" + probe, base.name_expression, base.options))
    results = backend.compile_many(requests, workers=2)  # type: ignore[attr-defined]
    assert [str(r)[:400] for r in results if isinstance(r, CompileError)] == []


@pytest.mark.nvrtc
@pytest.mark.parametrize(("config", "key", "rule"), [
    ({**CONFIG, "vector_bytes": 16}, {**BF16, "N": 1001}, "vector-divides-row"),
    ({**CONFIG, "threads": 1024, "rows_per_block": 2}, BF16, "block-size"),
    ({**CONFIG, "threads": 48}, BF16, "row-whole-waves"),
])
def test_a_config_the_check_refuses_for_an_asserted_rule_does_not_compile(
        tmp_path: Path, config: dict[str, object], key: dict[str, object], rule: str) -> None:
    why = SPEC.valid(config, key, 32, 8, True)
    assert why is not None
    with pytest.raises(CompileError) as caught:
        _nvrtc_backend(tmp_path).compile(SPEC.build(config, key, H200))  # type: ignore[attr-defined]
    assert f"{rule}: " in caught.value.log


def test_a_row_longer_than_the_source_can_count_is_refused_as_a_key() -> None:
    from flyconfigs.errors import InvalidKeyError
    from flyconfigs.kernels.rmsnorm.declaration import MAX_N
    from flyconfigs.kernels.rownorm import MAX_INDEX

    assert SPEC.check_key({**BF16, "N": MAX_N})["N"] == MAX_N
    for n in (MAX_N + 1, MAX_INDEX):
        with pytest.raises(InvalidKeyError, match=f"'N' of 'rmsnorm' must be <= {MAX_N}, got {n}"):
            SPEC.check_key({**BF16, "N": n})


@pytest.mark.slow  # NVRTC unrolls a row of 2**31 elements: seconds a variant
@pytest.mark.nvrtc
def test_the_longest_row_compiles_with_what_the_shipped_artifacts_serve_and_the_widest_configs(tmp_path: Path) -> None:
    # Before the key's bound, N = 2**31 - 1 was served a config whose constants overflow
    # int in the source (NVRTC: "expression must have a constant value").
    from flyconfigs.kernels.rmsnorm.declaration import MAX_N
    from flyconfigs.registry import Resolver

    artifacts = Path(__file__).resolve().parent.parent / "artifacts" / "sm90"
    resolver = Resolver(paths=[str(artifacts)], detector=None)
    widest = {**CONFIG, "threads": 1024, "rows_per_block": 1, "row_storage": "reread", "vector_bytes": 0, "cluster": 8}
    variants = []
    # What is served at the bound and just under it (an odd row: the scalar path), for
    # the two element sizes; a compile at this N takes seconds, so one row each.
    for dtype, weight, n in (("bf16", "fp32", MAX_N), ("fp32", "fp32", MAX_N - 7)):
        key = {"M": 1, "N": n, "dtype": dtype, "weight_dtype": weight}
        variants.append((dict(resolver.resolve("rmsnorm", key, H200).config), key))
    variants.append((widest, {**BF16, "N": MAX_N}))
    variants.append(({**widest, "vector_bytes": 16, "cluster": 1}, {**BF16, "N": MAX_N - 7}))
    assert all(SPEC.check_config(config, key, H200) is None for config, key in variants)
    results = _nvrtc_backend(tmp_path).compile_many(  # type: ignore[attr-defined]
        [SPEC.build(config, key, H200) for config, key in variants], workers=2)
    assert [str(r)[:400] for r in results if isinstance(r, CompileError)] == []
