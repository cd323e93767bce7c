"""Served means valid, proven without a GPU: every kernel family is resolved against the
committed artifacts (``artifacts/<target>``, what the official packages ship) over keys
far wider than the tuned grids, on every device those artifacts name (the measured sm90 and
the predicted gfx942, sm80, sm100, gfx90a and gfx950); every served config passes its
family's check; and a deterministic sample of what is served for RMSNorm is compiled from
its one source by real NVRTC (sm90) and real hipRTC (gfx942) (tests/test_predicted_targets.py
compiles every winner of the other predicted targets).  Because the
check and the source's ``static_assert``s are the same rules
(:mod:`flyconfigs.kernels.rmsnorm.validity`), a config the check passes is one that
compiles; the compiles confirm it on the sample.

The sweep, for each family: every row length from 1 to 16384, each on a device (of
either target), a dtype pair and an odd row count drawn for it from a seeded generator
(so every device, pair and count meets every residue of N), over the dtype pairs the
device's artifacts hold (the others are served the default, a slower path, swept
next); then every device × every dtype pair × the odd row counts × the row lengths that
broke before and the edges (:data:`NAMED_N`).  The second part runs with the suite; the
whole sweep (about two minutes on one core) and the check that rows off the tuned grid
are served a tuned winner are ``slow`` (CI runs them).  The compiles sample what the
second part serves."""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

import pytest

from flyconfigs.errors import BackendUnavailableError, CompileError
from flyconfigs.kernels.rmsnorm import SPEC as RMSNORM
from flyconfigs.registry import DeviceQuery, Resolution, Resolver
from flyconfigs.registry.declarations import kernel_declaration
from hiprtc_helpers import needs_prefix, run_in_prefix

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
TARGETS = ("sm90", "gfx942", "sm80", "sm100", "gfx90a", "gfx950")
FAMILIES = ("rmsnorm", "fused_add_rmsnorm")
ODD_M = (1, 3, 77, 1000, 4097, 65535)
MAX_N = 16384
NAMED_N = (1, 3, 8, 100, 1001, 1023, 4095, 5000, 12289, 16384)
"""Row lengths each device, dtype pair and odd row count is resolved at: the ones that
failed to compile before (100, 1001, 1023), and the edges of the space."""
DTYPE_PAIRS = (("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp16"), ("fp16", "fp32"), ("fp32", "fp32"))
SAMPLE = {"sm90": 20, "gfx942": 10}
"""Distinct (served config, row) variants compiled per target; each takes about half a
second on one core."""

Tuned = dict[DeviceQuery, set[tuple[str, str]]]


@functools.cache
def _resolver(target: str) -> Resolver:
    """A resolver of the committed artifacts of ``target`` alone (no package, no device
    detection), shared by the tests of this module: it loads each artifact once."""
    return Resolver(paths=[str(ARTIFACTS / target)], detector=None)


@functools.cache
def _shipped(target: str) -> dict[str, Tuned]:
    """Per family, each device the committed artifacts of ``target`` name and the dtype
    pairs its artifacts hold."""
    found: dict[str, Tuned] = {family: {} for family in FAMILIES}
    for entry in _resolver(target).all_entries():
        device = DeviceQuery.of(entry.device)
        for family in FAMILIES:
            found[family].setdefault(device, set())
        found[entry.kernel][device].add((str(entry.key["dtype"]), str(entry.key["weight_dtype"])))
    return found


@functools.cache
def _sweep(family: str, every_n: bool = True) -> tuple[Resolution, ...]:
    """Every resolution of the sweep (see the module's docstring), in order; without
    ``every_n`` only its second part, the named row lengths on every device."""
    tuned = {(target, device): pairs for target in TARGETS for device, pairs in _shipped(target)[family].items()}
    devices = sorted(tuned, key=lambda item: (item[0], item[1].describe()))
    rng = random.Random(family)
    out = []
    for n in range(1, MAX_N + 1 if every_n else 1):
        target, device = rng.choice(devices)
        dtype, weight = rng.choice(sorted(tuned[target, device]) or list(DTYPE_PAIRS))
        key = {"M": rng.choice(ODD_M), "N": n, "dtype": dtype, "weight_dtype": weight}
        out.append(_resolver(target).resolve(family, key, device))
    for target, device in devices:
        for (dtype, weight) in DTYPE_PAIRS:
            for m in ODD_M:
                for n in NAMED_N:
                    key = {"M": m, "N": n, "dtype": dtype, "weight_dtype": weight}
                    out.append(_resolver(target).resolve(family, key, device))
    return tuple(out)


def _refused(resolutions: tuple[Resolution, ...]) -> list[str]:
    out = []
    decls = {name: kernel_declaration(name) for name in FAMILIES}
    for r in resolutions:
        why = decls[r.kernel].check_config(r.config, r.key, r.device)
        if why is not None:
            out.append(f"{r.kernel} {dict(r.key)} on {r.device.describe() if r.device else '?'}: {dict(r.config)} "
                       f"({r.file or 'default'}): {why}")
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_every_config_served_at_the_named_row_lengths_passes_its_familys_check(family: str) -> None:
    resolutions = _sweep(family, every_n=False)
    assert {r.device.arch for r in resolutions if r.device is not None} == set(TARGETS)
    assert {r.key["N"] for r in resolutions} == set(NAMED_N)
    refused = _refused(resolutions)
    assert refused == [], f"{len(refused)} served configs refused, e.g. {refused[:3]}"


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_every_config_served_over_the_sweep_passes_its_familys_check(family: str) -> None:
    resolutions = _sweep(family)
    assert len(resolutions) >= MAX_N
    assert {r.device.arch for r in resolutions if r.device is not None} == set(TARGETS)
    refused = _refused(resolutions)
    assert refused == [], f"{len(refused)} served configs refused, e.g. {refused[:3]}"


@pytest.mark.slow
def test_rows_off_the_tuned_grid_are_served_a_tuned_winner_where_one_fits() -> None:
    # Nearest-key serving stays useful: where a device has artifacts of a dtype pair, a
    # row is served the default only when no winner of that pair on that arch fits it,
    # as tuned or as its kernel adapts it.
    winners: dict[tuple[str, str, str], list[dict[str, object]]] = {}
    for target in TARGETS:
        for entry in _resolver(target).all_entries():
            artifact = entry.load(_resolver(target).problems)
            if entry.kernel == "rmsnorm" and artifact is not None:
                pair = (target, str(entry.key["dtype"]), str(entry.key["weight_dtype"]))
                winners.setdefault(pair, []).append(dict(artifact.winner.config))
    served = [r for r in _sweep("rmsnorm") if r.device is not None
              and (r.device.arch, str(r.key["dtype"]), str(r.key["weight_dtype"])) in winners]
    assert len(served) > MAX_N // 2
    for r in served:
        if r.source != "default":
            continue
        assert r.device is not None
        fitting = [w for w in winners[r.device.arch, str(r.key["dtype"]), str(r.key["weight_dtype"])]
                   if RMSNORM.check_config(w, r.key, r.device) is None or RMSNORM.adapt_config(w, r.key, r.device)]
        assert fitting == [], (dict(r.key), r.device.describe(), fitting[:1])
    adapted = [r for r in served if r.adapted_from is not None]
    assert len(adapted) > len(served) // 4, "rows the tuned widths do not divide are served adapted winners"
    assert all(r.key_match == "nearest" and r.file and r.adapted_from != r.config for r in adapted)


def _distinct_variants(target: str) -> list[tuple[dict[str, object], dict[str, object], DeviceQuery]]:
    """The distinct RMSNorm variants the sweep served on ``target`` at the named row
    lengths (``M`` is not compiled in), as (config, key, device), in a stable order,
    adapted ones first."""
    seen: dict[str, tuple[dict[str, object], dict[str, object], DeviceQuery, bool]] = {}
    for r in _sweep("rmsnorm", every_n=False):
        assert r.device is not None
        if r.device.arch != target:
            continue
        # What the build specialises on: the config, the row, the dtypes (one wave per target).
        variant = json.dumps([sorted(r.config.items()), r.key["N"], r.key["dtype"], r.key["weight_dtype"]])
        seen.setdefault(variant, (dict(r.config), dict(r.key), r.device, r.adapted_from is not None))
    ordered = sorted(seen.items(), key=lambda item: (not item[1][3], item[0]))
    return [(config, key, device) for _, (config, key, device, _) in ordered]


def _sample(items: list[tuple[dict[str, object], dict[str, object], DeviceQuery]], size: int
            ) -> list[tuple[dict[str, object], dict[str, object], DeviceQuery]]:
    """``size`` items spread evenly over ``items`` (adapted and unadapted in proportion)."""
    step = max(1.0, len(items) / size)
    return [items[int(i * step)] for i in range(min(size, len(items)))]


def _nvrtc() -> object:
    from flyconfigs.gpu.cuda import CudaBinding

    try:
        binding = CudaBinding()
        binding.compiler_version()
    except (BackendUnavailableError, ImportError, RuntimeError) as exc:
        pytest.skip(f"NVRTC is not loadable here ({exc}); scripts/test.sh installs it")
    return binding


@pytest.mark.nvrtc
def test_a_sample_of_what_sm90_serves_compiles_with_nvrtc(tmp_path: Path) -> None:
    from flyconfigs.gpu.backend import Backend
    from flyconfigs.gpu.cache import CompileCache

    backend = Backend(_nvrtc(), arch="sm90", cache=CompileCache(tmp_path / "cache"))  # type: ignore[arg-type]
    variants = _sample(_distinct_variants("sm90"), SAMPLE["sm90"])
    assert len(variants) == SAMPLE["sm90"]
    requests = [RMSNORM.build(config, key, device) for config, key, device in variants]
    results = backend.compile_many(requests, workers=2)
    failed = [(variants[i][0], variants[i][1], str(r)[:300]) for i, r in enumerate(results) if isinstance(r, CompileError)]
    assert failed == []


@pytest.mark.hiprtc
@pytest.mark.slow
@needs_prefix
def test_a_sample_of_what_gfx942_serves_compiles_with_hiprtc() -> None:
    variants = _sample(_distinct_variants("gfx942"), SAMPLE["gfx942"])
    assert len(variants) == SAMPLE["gfx942"]
    payload = json.dumps([[config, key, [d.vendor, d.arch, d.product, d.compute_units, list(d.features or ())]]
                          for config, key, d in variants])
    failed = run_in_prefix(f"""
import json
from flyconfigs.gpu import get_backend
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.registry import DeviceQuery
backend = get_backend("hip", arch="gfx942")
variants = json.loads({payload!r})
requests = [SPEC.build(c, k, DeviceQuery(d[0], d[1], d[2], d[3], tuple(d[4]))) for c, k, d in variants]
results = backend.compile_many(requests, workers=2)
print(json.dumps([[v[0], v[1], str(r)[:300]] for v, r in zip(variants, results) if isinstance(r, Exception)]))
""")
    assert failed == []


def test_the_sweep_meets_the_rows_that_failed_to_compile_before() -> None:
    # N=100, 1001 and 1023 at M=4096 were served a vector width that does not divide the
    # row on every device; each is now served a config the check (and so the source) takes.
    for target in TARGETS:
        for device in _shipped(target)["rmsnorm"]:
            for n in (100, 1001, 1023):
                r = _resolver(target).resolve("rmsnorm", {"M": 4096, "N": n, "dtype": "bf16", "weight_dtype": "bf16"}, device)
                vbytes = int(r.config["vector_bytes"])
                assert vbytes == 0 or n * 2 % vbytes == 0, (target, device, n, dict(r.config))
                assert r.source != "default"
