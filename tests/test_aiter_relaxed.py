"""aiter's two lookups that relax a key column, served as aiter serves them from its real
CSV rows (corpora/aiter-e4048607): the fused MoE's retry with any activation when the
asked one has no row (``get_2stage_cfgs``), and the grouped MoE's relaxing of ``cu_num``
when no row has the running GPU's (``_find_grouped_config``: the lowest ``us`` of the
rows that match otherwise).  ``aiter_corpus.Reference`` restates both from aiter's source;
a resolution of a relaxed row says so and is a nearest-key match, never an exact one."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from aiter_corpus import CORPUS, REVISION, Reference, read_rows, tuned_files
from flyconfigs.adapters.aiter import import_aiter_file
from flyconfigs.kernels.aiter_family import AiterFamily
from flyconfigs.kernels.aiter_gemm import FMOE, GROUPED_FMOE, family_of
from flyconfigs.registry.resolve import Resolver
from flyconfigs.schema import write_atomic
from flyconfigs.schema.table import Table

CONFIGS = CORPUS / "aiter" / "configs"
DS_V3 = CONFIGS / "model_configs" / "a8w8_blockscale_tuned_fmoe_ds_v3.csv"
ACTIVATIONS = ("ActivationType.Silu", "ActivationType.Gelu", "ActivationType.Swiglu", "ActivationType.Situv2")
# One shape of both files (gfx942, 80 CUs, one token): ds_v3 tuned it for Silu (line 202),
# aiter's default file for Gelu (line 202).
SHAPE = {"cu_num": 80, "token": 1, "model_dim": 7168, "inter_dim": 256, "expert": 256, "topk": 8,
         "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fnuz", "q_dtype_w": "torch.float8_e4m3fnuz",
         "q_type": "QuantType.per_Token", "use_g1u1": 1, "doweight_stage1": 0}
MI308X = "gfx942:80:AMD Instinct MI308X"


def _installed(files: list[Path], folder: Path) -> tuple[Resolver, list[Table]]:
    tables = [t for path in files for t in import_aiter_file(path, REVISION).tables]
    for table in tables:
        write_atomic(folder / table.file_name(), table.to_json_bytes())
    return Resolver(paths=[str(folder)], detector=None), tables


def _files(family: AiterFamily) -> list[Path]:
    return [p for p in tuned_files() if family_of(p.name) is family]


def test_fmoe_retries_with_any_activation_taking_the_default_files_row_first(tmp_path: Path) -> None:
    resolver, _ = _installed([DS_V3, CONFIGS / "tuned_fmoe.csv"], tmp_path)
    gelu = resolver.resolve("aiter_fmoe", {**SHAPE, "act_type": "ActivationType.Gelu"}, MI308X)
    silu = resolver.resolve("aiter_fmoe", {**SHAPE, "act_type": "ActivationType.Silu"}, MI308X)
    assert (gelu.key_match, gelu.config["block_m"], silu.key_match, silu.config["block_m"]) == ("exact", 32, "exact", 16)
    # No Swiglu row for this shape: aiter's retry keeps the first row of its merged file,
    # which begins with its default file (the Gelu row), whatever order the files come in.
    swiglu = resolver.resolve("aiter_fmoe", {**SHAPE, "act_type": "ActivationType.Swiglu"}, MI308X)
    assert dict(swiglu.config) == dict(gelu.config)
    assert swiglu.key_match == "nearest" and swiglu.source == "override"
    assert swiglu.matched_key is not None and swiglu.matched_key["act_type"] == "ActivationType.Gelu"
    assert any("relaxed it" in r and "act_type=ActivationType.Gelu (asked ActivationType.Swiglu)" in r
               for r in swiglu.reasons)
    _, steps = resolver.explain("aiter_fmoe", {**SHAPE, "act_type": "ActivationType.Swiglu"}, MI308X)
    assert any(s.looked_for.endswith("nearest key") and "relaxed it" in s.outcome for s in steps)
    assert resolver.problems.problems() == []


def test_fmoe_retries_with_any_activation_at_the_asked_tier_before_the_smaller_tier(tmp_path: Path) -> None:
    path = tmp_path / "tuned_fmoe.csv"
    header, rows = read_rows(CONFIGS / "tuned_fmoe.csv")
    row = next(r for r in rows if r[header.index("token")] == "1" and r[header.index("cu_num")] == "80")
    # The same real row at the two tiers, of two activations: 32768 Silu and 131072 Gelu.
    made = [dict(zip(header, row, strict=True)) | {"token": "32768", "act_type": "ActivationType.Silu", "block_m": "64"},
            dict(zip(header, row, strict=True)) | {"token": "131072", "act_type": "ActivationType.Gelu", "block_m": "128"}]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerows(made)
    resolver, _ = _installed([path], tmp_path / "tables")
    key = {c: v for c, v in dict(zip(header, row, strict=True)).items() if c in FMOE.key}
    asked = {**{k: int(v) if v.lstrip("-").isdigit() else v for k, v in key.items()}, "token": 200000,
             "act_type": "ActivationType.Silu"}
    served = resolver.resolve("aiter_fmoe", asked, MI308X)
    # aiter: (131072, Silu), then (131072, any activation): the Gelu row, before (32768, Silu).
    assert served.config["block_m"] == 128 and served.key_match == "nearest"
    assert Reference(FMOE, [path]).config("gfx942", asked)["block_m"] == 128


def _asked_other_activations(family: AiterFamily, tables: list[Table], every: int) -> list[tuple[Table, dict[str, Any]]]:
    """Each row's shape with each activation that no row of the family has for it."""
    tuned: set[tuple[Any, ...]] = set()
    for table in tables:
        for i in range(len(table.rows)):
            key = table.key_of(i)
            tuned.add((table.device.arch, *(key[c] for c in family.key)))
    asks = []
    for table in tables:
        for i in range(0, len(table.rows), every):
            key = {k: v for k, v in table.key_of(i).items() if k != "flydsl_fallback"}
            for act in ACTIVATIONS:
                other = {**key, "act_type": act}
                if (table.device.arch, *(other[c] for c in family.key)) not in tuned:
                    asks.append((table, other))
    return asks


def _check_fmoe(files: list[Path], tmp_path: Path, every: int) -> tuple[int, int]:
    resolver, tables = _installed(files, tmp_path)
    reference = Reference(FMOE, files)
    retried = 0
    asks = _asked_other_activations(FMOE, tables, every)
    for table, asked in asks:
        device = f"{table.device.arch}:{table.device.compute_units}:AMD Instinct"
        served = resolver.resolve("aiter_fmoe", asked, device)
        assert dict(served.config) == reference.config(table.device.arch, asked), (table.provenance.source, asked)
        if served.config:
            assert served.key_match == "nearest" and served.matched_key is not None
            assert served.matched_key["act_type"] != asked["act_type"]
            retried += 1
    assert resolver.problems.problems() == []
    return len(asks), retried


def test_fmoe_served_for_an_absent_activation_is_what_aiters_retry_finds(tmp_path: Path) -> None:
    asked, retried = _check_fmoe([CONFIGS / "tuned_fmoe.csv", DS_V3], tmp_path, every=7)
    assert asked > 100 and retried > 50


@pytest.mark.slow
def test_fmoe_served_for_an_absent_activation_is_what_aiters_retry_finds_in_every_file(tmp_path: Path) -> None:
    asked, retried = _check_fmoe(_files(FMOE), tmp_path, every=1)
    assert asked > 5000 and retried > 1000


def test_grouped_moe_relaxes_cu_num_as_aiter_does(tmp_path: Path) -> None:
    files = _files(GROUPED_FMOE)
    resolver, tables = _installed(files, tmp_path)
    reference = Reference(GROUPED_FMOE, files)
    (table,) = tables
    for i in range(len(table.rows)):
        key = table.key_of(i)
        own = resolver.resolve("aiter_grouped_fmoe", key, "gfx1250:256:AMD gfx1250")
        assert own.key_match == "exact" and not own.borrowed
        # A gfx1250 of another CU count: no row has its cu_num, so aiter takes the rows
        # that match otherwise, the lowest us.
        asked = {**key, "cu_num": 128}
        served = resolver.resolve("aiter_grouped_fmoe", asked, "gfx1250:128:AMD gfx1250")
        want = reference.config("gfx1250", asked)
        assert want and dict(served.config) == want == dict(own.config)
        assert served.key_match == "nearest" and served.borrowed and served.matched_key is not None
        assert served.matched_key["cu_num"] == 256 and served.matched_device == table.device.identity
        assert any("cu_num=256 (asked 128)" in r for r in served.reasons)
    assert resolver.problems.problems() == []


def test_grouped_moe_relaxed_takes_the_lowest_us_of_every_cu_count(tmp_path: Path) -> None:
    """Upstream lines 2 and 3 copied to a second CU count (192), the first made faster and
    the second slower than upstream: the test's own variant of real rows, since aiter's
    file has one CU count."""
    upstream = CONFIGS / "tuned_grouped_fmoe.csv"
    header, rows = read_rows(upstream)
    line2, line3 = (dict(zip(header, r, strict=True)) for r in rows[:2])
    variant = tmp_path / "tuned_grouped_fmoe_192.csv"
    with open(variant, "w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerow({**line2, "cu_num": "192", "us": str(float(line2["us"]) / 2), "tile_m": "32"})
        writer.writerow({**line3, "cu_num": "192", "us": str(float(line3["us"]) * 2), "tile_m": "48"})
    resolver, tables = _installed([upstream, variant], tmp_path / "tables")
    reference = Reference(GROUPED_FMOE, [upstream, variant])
    (own,) = (t for t in tables if t.device.compute_units == 256)
    assert (own.entry_of(0), own.entry_of(1)) == ("line 2", "line 3")
    served = []
    for i in (0, 1):
        asked = {**own.key_of(i), "cu_num": 128}
        found = resolver.resolve("aiter_grouped_fmoe", asked, "gfx1250:128:AMD gfx1250")
        assert dict(found.config) == reference.config("gfx1250", asked) != {}
        assert found.key_match == "nearest" and found.matched_key is not None
        served.append((found.config["tile_m"], found.matched_key["cu_num"]))
    assert served == [(32, 192), (int(line3["tile_m"]), 256)]


def test_the_grouped_moe_relaxes_cu_num_only_after_the_asked_cu_num() -> None:
    key = {c: 1 for c in GROUPED_FMOE.key} | {"act_type": "a", "dtype": "b", "q_dtype_a": "c", "q_dtype_w": "d",
                                               "q_type": "e", "cu_num": 128}
    asked = GROUPED_FMOE.check_key(key)
    assert GROUPED_FMOE.key_distance(asked, asked) == (0.0, 0.0)
    assert GROUPED_FMOE.key_distance(asked, {**asked, "cu_num": 256}) == (0.0, 1.0)
    assert GROUPED_FMOE.key_distance(asked, {**asked, "cu_num": 256, "token": 2}) is None
    # use_g1u1 and doweight_stage1 aiter's grouped lookup never compares: no retry level.
    assert GROUPED_FMOE.key_distance(asked, {**asked, "use_g1u1": 0, "doweight_stage1": 1}) == (0.0, 0.0)
    assert GROUPED_FMOE.key_distance(asked, {**asked, "use_g1u1": 0, "cu_num": 256}) == (0.0, 1.0)
    assert GROUPED_FMOE.relaxed_axes == ("cu_num", "use_g1u1", "doweight_stage1")
    assert FMOE.relaxed_axes == ("act_type",)
    with pytest.raises(ValueError, match="not exact key columns"):
        AiterFamily("x", ("x_tuned",), None, ("cu_num", "token"), ("a",), "moe", retried=("token",))


def test_the_grouped_moe_never_compares_use_g1u1_or_doweight_stage1(tmp_path: Path) -> None:
    files = _files(GROUPED_FMOE)
    resolver, (table,) = _installed(files, tmp_path)
    reference = Reference(GROUPED_FMOE, files)
    for i in range(0, len(table.rows), 10):
        key = table.key_of(i)
        for cus in (256, 128):
            asked = {**key, "cu_num": cus, "use_g1u1": 0, "doweight_stage1": 1}
            served = resolver.resolve("aiter_grouped_fmoe", asked, f"gfx1250:{cus}:AMD gfx1250")
            assert dict(served.config) == reference.config("gfx1250", asked) == table.config_of(i)
            assert served.key_match == "nearest" and any("use_g1u1=1 (asked 0)" in r for r in served.reasons)


def test_a_grouped_row_without_a_time_comes_first_as_aiter_sorts_it(tmp_path: Path) -> None:
    """Upstream line 2 copied to a 192-CU row with its ``us`` left empty (the test's own
    variant): aiter sorts by ``float(us or 0.0)``, so it serves that row first."""
    upstream = CONFIGS / "tuned_grouped_fmoe.csv"
    header, rows = read_rows(upstream)
    line2 = dict(zip(header, rows[0], strict=True))
    variant = tmp_path / "tuned_grouped_fmoe_192.csv"
    with open(variant, "w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerow({**line2, "cu_num": "192", "us": "", "tile_m": "32"})
    resolver, tables = _installed([upstream, variant], tmp_path / "tables")
    (own,) = (t for t in tables if t.device.compute_units == 256)
    asked = {**own.key_of(0), "cu_num": 128}
    served = resolver.resolve("aiter_grouped_fmoe", asked, "gfx1250:128:AMD gfx1250")
    assert served.config["tile_m"] == 32
    assert dict(served.config) == Reference(GROUPED_FMOE, [upstream, variant]).config("gfx1250", asked)


def test_an_opus_stage1_row_is_never_served_for_an_activation_aiter_does_not_run_it_for(tmp_path: Path) -> None:
    dsv4 = CONFIGS / "model_configs" / "dsv4_fp8fp4_tuned_fmoe.csv"
    resolver, (table, *_) = _installed([dsv4], tmp_path)
    index = next(i for i in range(len(table.rows)) if str(table.config_of(i)["kernelName1"]).startswith("opus_"))
    key = {k: v for k, v in table.key_of(index).items() if k != "flydsl_fallback"}
    assert key["act_type"] == "ActivationType.Silu"
    device = f"gfx950:{table.device.compute_units}:AMD Instinct MI355X"
    # Swiglu runs an Opus stage 1: the retry serves the Silu row; Gelu does not: aiter
    # discards the row and takes its default path.
    swiglu = resolver.resolve("aiter_fmoe", {**key, "act_type": "ActivationType.Swiglu"}, device)
    assert dict(swiglu.config) == table.config_of(index) and swiglu.key_match == "nearest"
    gelu = resolver.resolve("aiter_fmoe", {**key, "act_type": "ActivationType.Gelu"}, device)
    assert gelu.source == "default" and dict(gelu.config) == {}
    assert any("discards an Opus stage-1 kernel for ActivationType.Gelu" in r for r in gelu.reasons)
    assert Reference(FMOE, [dsv4]).config("gfx950", {**key, "act_type": "ActivationType.Gelu"}) == {}
