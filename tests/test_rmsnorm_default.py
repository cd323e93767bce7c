"""RMSNorm's learned default: always a valid config, and as good as the H200's measurements
say on row lengths it was not built from."""

from __future__ import annotations

import functools
import json
import math
import random
from importlib.resources import files as resources_files
from pathlib import Path

import pytest

from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.kernels.rmsnorm import default as rmsnorm_default
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.schema import Artifact
from flyconfigs.schema.pack import folder_artifacts

SM90 = Path(__file__).resolve().parents[1] / "artifacts" / "sm90"
H200 = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())
MI300X = DeviceQuery("amd", "gfx942", "AMD Instinct MI300X", 304, ())


@functools.cache
def _measured() -> list[Artifact]:
    """The committed H200 tunings, which the shipped table was fitted on (read once: two
    tests use all 436); the package's tunings of other products are left out."""
    return [a for a in folder_artifacts(SM90, "rmsnorm")  # the packs' rows, candidates included
            if a.selection.measured and a.device.product == "NVIDIA H200"]


@pytest.mark.parametrize("n", [128, 1000, 3584, 4099, 8192, 16384])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_a_shape_stands_for_the_config_it_was_taken_from(n: int, dtype: str) -> None:
    key = SPEC.check_key(SPEC.complete_key({"M": 64, "N": n, "dtype": dtype}))
    for config in SPEC.candidates(key, 32):
        assert rmsnorm_default.config_of(rmsnorm_default.shape_of(config, n, dtype), n, dtype) == config


MULTI = {"threads": 32, "rows_per_block": 2, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0, "cluster": 1,
         "cache_hints": "none"}
"""A block of two rows of one 16-byte vector a thread at N = 256 bf16: one wave."""


def test_a_multi_row_shape_carried_to_a_shorter_row_can_have_its_block_filled() -> None:
    shape = rmsnorm_default.shape_of(MULTI, 256, "bf16")
    # At N = 128 the shape's threads halve to 16; filled, its rows double to keep 128 threads.
    assert rmsnorm_default.config_of(shape, 128, "bf16") == {**MULTI, "threads": 16}
    assert rmsnorm_default.config_of(shape, 128, "bf16", 128) == {**MULTI, "threads": 16, "rows_per_block": 8}
    assert rmsnorm_default.config_of(shape, 512, "bf16", 128) == {**MULTI, "threads": 64, "rows_per_block": 2}
    single = {**MULTI, "rows_per_block": 1}  # a block of one row is the shape's whatever its size
    assert rmsnorm_default.config_of(rmsnorm_default.shape_of(single, 256, "bf16"), 128, "bf16", 128) == {
        **single, "threads": 16}


def test_the_default_fills_a_block_only_where_it_carries_a_shape_to_another_row_length() -> None:
    shape = rmsnorm_default.shape_of(MULTI, 256, "bf16")
    table = rmsnorm_default.DefaultTable(132, {("bf16", "bf16", 4096, 256): {shape: 0.0},
                                               ("bf16", "bf16", 4096, 1024): {shape: 0.0}})

    def served(m: int, n: int) -> object:
        key = SPEC.check_key(SPEC.complete_key({"M": m, "N": n, "dtype": "bf16"}))
        return rmsnorm_default.choose(table, key, 132, SPEC.candidates(key, 32))

    # At the measured row length the shape is what was measured: one wave, two rows.
    assert served(4096, 256) == MULTI
    # Carried to N = 128 it is 16 threads; its block filled, 8 rows of them.
    assert served(4096, 128) == {**MULTI, "threads": 16, "rows_per_block": 8}
    # A key of 4 rows takes no block of 8 rows: filled as far as its rows allow.
    key = SPEC.check_key(SPEC.complete_key({"M": 4, "N": 128, "dtype": "bf16"}))
    assert {**MULTI, "threads": 16, "rows_per_block": 8} not in SPEC.candidates(key, 32)
    assert served(4, 128) == {**MULTI, "threads": 16, "rows_per_block": 4}


def test_the_default_is_a_valid_config_of_the_space_on_every_device() -> None:
    rng = random.Random(7)
    devices = [H200, MI300X, DeviceQuery("nvidia", "sm80", None, 108, None), None]
    for _ in range(300):
        key = SPEC.check_key(SPEC.complete_key({"M": rng.choice([1, 3, 17, 1000, 70000, rng.randint(1, 1 << 18)]),
                                                "N": rng.choice([64, 777, 3584, 5000, 20000, rng.randint(1, 40000)]),
                                                "dtype": rng.choice(["bf16", "fp16", "fp32"])}))
        for device in devices:
            config = SPEC.default_config(key, device)
            assert SPEC.check_config(config, key, device) is None, (key, device, config)
            assert config in SPEC.space(key, device)


def test_an_empty_table_falls_back_to_the_rule_of_thumb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rmsnorm_default, "table", lambda: rmsnorm_default.DefaultTable(132, {}))
    key = SPEC.check_key(SPEC.complete_key({"M": 4096, "N": 4096, "dtype": "bf16"}))
    assert SPEC.default_config(key, H200) == SPEC.rule_of_thumb(key, 32)


def test_rows_are_read_at_the_reference_devices_scale() -> None:
    wide, narrow = (0, 1, 16, "reg", 0, 1), (2, 1, 16, "reg", 0, 1)
    table = rmsnorm_default.DefaultTable(100, {
        ("bf16", "bf16", 64, 4096): {wide: 0.0, narrow: 0.1},
        ("bf16", "bf16", 4096, 4096): {narrow: 0.0, wide: 0.1},
    })
    key = {"M": 1024, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
    space = SPEC.candidates(key, 32)
    # 1024 rows on a device of 400 CUs are 256 rows of the 100-CU reference: nearer 64.
    assert rmsnorm_default.choose(table, key, 400, space) == rmsnorm_default.config_of(wide, 4096, "bf16")
    # On a device of 25 CUs they are 4096 rows of the reference.
    assert rmsnorm_default.choose(table, key, 25, space) == rmsnorm_default.config_of(narrow, 4096, "bf16")


def test_a_row_length_between_tuned_ones_is_scored_by_both_sides() -> None:
    a, b = (1, 1, 16, "reg", 0, 1), (2, 1, 16, "reg", 0, 1)
    table = rmsnorm_default.DefaultTable(132, {
        ("bf16", "bf16", 1, 2048): {a: 0.0, b: 0.05},
        ("bf16", "bf16", 1, 8192): {b: 0.0},  # a is missing here: it costs MISSING
    })
    scores = dict((s, v) for v, s in table.scores(table.columns("bf16", "bf16", 1), 4096))
    weight = 1.0 / (math.log(2) + 0.05)  # both tuned lengths are a factor of 2 away
    assert scores[a] == pytest.approx(weight * (0.0 + rmsnorm_default.MISSING))
    assert scores[b] == pytest.approx(weight * (0.05 + 0.0))


def test_a_row_count_between_tuned_ones_is_read_from_both_sides() -> None:
    a, b = (1, 1, 16, "reg", 0, 1), (2, 1, 16, "reg", 0, 1)
    table = rmsnorm_default.DefaultTable(132, {
        ("bf16", "bf16", 64, 4096): {a: 0.0, b: 0.02},
        ("bf16", "bf16", 1024, 4096): {b: 0.0, a: 0.3},
        ("bf16", "bf16", 8192, 4096): {b: 0.0},
    })
    # A tuned row count reads its own column only; one past either end, the nearest.
    assert table.columns("bf16", "bf16", 1024) == [(1.0, ("bf16", "bf16", 1024))]
    assert [c[2] for _, c in table.columns("bf16", "bf16", 16)] == [64]
    assert [c[2] for _, c in table.columns("bf16", "bf16", 20000)] == [8192]
    # 128 rows lie between 64 and 1024: one octave from 64, three from 1024.
    weights = dict((c[2], w) for w, c in table.columns("bf16", "bf16", 128))
    assert weights == {64: pytest.approx(1 / 1.05), 1024: pytest.approx(1 / 3.05)}
    scores = dict((s, v) for v, s in table.scores(table.columns("bf16", "bf16", 128), 4096))
    n_weight = 1 / rmsnorm_default.SOFTEN  # N = 4096 is tuned in both columns
    assert scores[a] == pytest.approx(n_weight * (0.0 / 1.05 + 0.3 / 3.05))
    assert scores[b] == pytest.approx(n_weight * (0.02 / 1.05 + 0.0 / 3.05))
    # The nearer column alone (64 rows) would serve a; read from both sides, b serves.
    key = SPEC.check_key(SPEC.complete_key({"M": 128, "N": 4096, "dtype": "bf16"}))
    assert rmsnorm_default.choose(table, key, 132, SPEC.candidates(key, 32)) == rmsnorm_default.config_of(b, 4096, "bf16")


def test_a_shape_both_row_counts_measured_at_the_asked_row_length_is_served_as_measured() -> None:
    shape = rmsnorm_default.shape_of(MULTI, 256, "bf16")
    table = rmsnorm_default.DefaultTable(132, {("bf16", "bf16", 64, 256): {shape: 0.0},
                                               ("bf16", "bf16", 1024, 256): {shape: 0.0}})
    key = SPEC.check_key(SPEC.complete_key({"M": 128, "N": 256, "dtype": "bf16"}))
    assert table.measured(table.columns("bf16", "bf16", 128), 256)
    assert rmsnorm_default.choose(table, key, 132, SPEC.candidates(key, 32)) == MULTI  # not filled to 32 x 4


@pytest.mark.slow
def test_the_table_built_without_a_row_length_serves_it_within_10_percent_of_tuned() -> None:
    """Leave-one-N-out on the H200's measured tunings: the goal is 80% of keys within 10%."""
    artifacts = _measured()
    assert len(artifacts) >= 400
    timed = {id(a): [(SPEC.complete_config(c.config), c.timing.median_us) for c in a.candidates if c.timing] for a in artifacts}
    shipped = json.loads(resources_files("flyconfigs.kernels.rmsnorm").joinpath("default.json").read_text())
    keep, within = shipped["fitted_on"]["keep"], shipped["fitted_on"]["within"]
    within_goal = 0
    for n in sorted({int(a.key["N"]) for a in artifacts}):
        table = rmsnorm_default.build([(a.key, timed[id(a)]) for a in artifacts if a.key["N"] != n], 132, keep, within)
        for artifact in (a for a in artifacts if a.key["N"] == n):
            key = dict(artifact.key)
            config = rmsnorm_default.choose(table, key, 132, SPEC.candidates_on(key, artifact.device, 32))
            time = next(t for c, t in timed[id(artifact)] if c == config)
            within_goal += time <= 1.10 * artifact.winner.timing.median_us  # type: ignore[union-attr]
    assert within_goal / len(artifacts) >= 0.80
    # The score recorded when the tunings held full-precision timings; a pack keeps 5
    # significant digits, which may turn a near tie at a key or two.
    assert within_goal / len(artifacts) == pytest.approx(shipped["scores"]["leave_one_n_out"]["within_10_percent"],
                                                         abs=2.5 / len(artifacts))


@pytest.mark.slow
def test_the_shipped_table_is_the_one_built_from_every_measured_key() -> None:
    shipped = json.loads(resources_files("flyconfigs.kernels.rmsnorm").joinpath("default.json").read_text())
    artifacts = _measured()
    rebuilt = rmsnorm_default.build(
        [(a.key, [(SPEC.complete_config(c.config), c.timing.median_us) for c in a.candidates if c.timing]) for a in artifacts],
        132, shipped["fitted_on"]["keep"], shipped["fitted_on"]["within"])
    table = rmsnorm_default.decode(shipped["table"])
    assert table.cells.keys() == rebuilt.cells.keys()
    again = rmsnorm_default.decode(rmsnorm_default.encode(rebuilt))
    # Fitted when the tunings held full-precision timings; a pack keeps 5 significant
    # digits, on which the order of two candidates timed within a hair may turn: at most
    # 1% of the cells may differ beyond 1e-3 (relative).
    differ = [c for c in table.cells if table.cells[c].keys() != again.cells[c].keys() or any(
        abs(table.cells[c][s] - again.cells[c][s]) > 1e-3 * abs(table.cells[c][s]) + 1e-4 for s in table.cells[c])]
    assert len(differ) <= 0.01 * len(table.cells), (len(differ), len(table.cells), differ[:5])
