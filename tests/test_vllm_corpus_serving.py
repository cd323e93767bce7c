"""vLLM 0.34.0's whole corpus: every file imports, and flyconfigs serves what vLLM's own
lookup serves on every (file, batch size) pair tried (every entry, the midpoints between
neighbours and their neighbours, 1, and beyond both ends): the families' key_distance
alone on every pair but the ties of the three files whose batch sizes are out of order,
and a resolver over the imported files (whose rows keep the file's order, which the
families' ``tie_rank`` follows) on every pair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flyconfigs.adapters.vllm import import_vllm_file, parse_file_name
from flyconfigs.cli import main
from flyconfigs.registry import Resolver
from flyconfigs.registry.core.products import find_product
from tests.vllm_corpus import CONFIGS, config_files, probe_sizes, vllm_pick, vllm_table

# Three files list their batch sizes out of order; vLLM breaks a tie by that order.
UNSORTED = {"E=16,N=3200,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json",
            "E=16,N=6400,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json",
            "E=16,N=800,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"}
SAMPLE = ["E=128,N=384,device_name=NVIDIA_GB200,dtype=fp8_w8a8,block_shape=[128,128].json",
          "E=16,N=3200,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json",
          "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128]_down.json",
          "E=384,N=256,device_name=AMD_Instinct_MI355X,dtype=int4_w4a16,backend=flydsl.json",
          "E=8,N=14336,device_name=AMD_Instinct_MI300X.json",
          "E=16,N=800,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"]


def _served_by_rule(path: Path, table: dict[int, Any], m: int) -> int:
    named = parse_file_name(path.name)
    key = {**named.axes, "M": m}
    return min(table, key=lambda t: named.decl.key_distance(key, {**named.axes, "M": t}) or ())


def _ties_vllm_breaks_to_the_larger(path: Path) -> set[int]:
    order = list(vllm_table(path))
    s = sorted(order)
    return {(a + b) // 2 for a, b in zip(s, s[1:], strict=False)
            if (a + b) % 2 == 0 and order.index(b) < order.index(a)}


def test_every_file_name_parses_and_names_a_product_of_the_catalog() -> None:
    names = [parse_file_name(p.name) for p in config_files()]
    assert len(names) == 340
    assert {n.decl.name for n in names} == {"vllm_fused_moe", "vllm_flydsl_moe"}
    assert sum(n.axes.get("down", False) for n in names) == 2
    assert [n.device_name for n in names if find_product(n.device_name) is None] == []


def test_the_nearest_key_rule_serves_what_vllm_serves_on_every_pair_but_its_order_ties() -> None:
    pairs = differ = 0
    for path in config_files():
        table = vllm_table(path)
        ties = _ties_vllm_breaks_to_the_larger(path)
        for m in probe_sizes(list(table)):
            pairs += 1
            ours, theirs = _served_by_rule(path, table, m), vllm_pick(table, m)
            if m in ties:
                # vLLM takes the member listed first; key_distance alone, the smaller of
                # the two (the table's row order decides these: tests/test_vllm_ties.py).
                assert (ours, theirs) == (min(ours, theirs), max(ours, theirs)) and ours != theirs, (path.name, m)
                differ += 1
            else:
                assert ours == theirs, (path.name, m)
    assert {p.name for p in config_files() if _ties_vllm_breaks_to_the_larger(p)} == UNSORTED
    assert differ == 23 and pairs > 20000


def _serve_all(files: list[Path], out: Path) -> tuple[int, list[tuple[str, int]]]:
    assert main(["import", "vllm", *map(str, files), "--out", str(out)]) == 0
    resolver = Resolver(paths=[str(out)], detector=None)
    pairs, wrong = 0, []
    for path in files:
        named = parse_file_name(path.name)
        table = vllm_table(path)
        raw: dict[str, Any] = json.loads(path.read_text())
        for m in probe_sizes(list(table)):
            served = resolver.resolve(named.decl.name, {**named.axes, "M": m}, device=named.device_name)
            expect = vllm_pick(table, m)
            pairs += 1
            matched = served.matched_key["M"] if served.matched_key is not None else None
            if (served.source, matched, dict(served.config)) != ("override", expect, raw[str(expect)]):
                wrong.append((path.name, m))
    return pairs, wrong


def test_a_resolver_over_imported_files_serves_vllms_entry(tmp_path: Path) -> None:
    pairs, wrong = _serve_all([CONFIGS / name for name in SAMPLE], tmp_path / "imported")
    assert wrong == [] and pairs > 200


@pytest.mark.slow
def test_a_resolver_over_the_whole_imported_corpus_serves_vllms_entry(tmp_path: Path) -> None:
    results = [import_vllm_file(p) for p in config_files()]
    assert all(r.refused == [] for r in results) and sum(len(r.artifacts) for r in results) == 6066
    pairs, wrong = _serve_all(config_files(), tmp_path / "imported")
    assert wrong == [] and pairs > 20000
