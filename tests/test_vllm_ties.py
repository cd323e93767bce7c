"""vLLM breaks a tie between two equally near batch sizes by its file's order
(``min(configs, key=lambda x: abs(x - M))`` over the dict ``json.load`` read): three of
vLLM 0.34.0's files list their batch sizes out of order, and at their ties vLLM serves the
larger of the two.  flyconfigs serves the same through the families' ``tie_rank``
(:func:`~flyconfigs.registry.search.ties.file_order`: an imported file is one table whose rows
keep the file's order); a family without one (RMSNorm) keeps its own rule, and one whose
member fails is reported once and keeps ``key_distance``'s order."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from factories import MI300X, make_artifact
from flyconfigs.adapters.as_table import as_table
from flyconfigs.adapters.vllm import import_vllm_file, parse_file_name, tabulated
from flyconfigs.cli import main
from flyconfigs.kernels import rmsnorm
from flyconfigs.kernels.vllm_fused_moe import SPEC, VLLMFusedMoESpec
from flyconfigs.registry import Resolver, register_kernel, unregister_kernel
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.families.contract import KernelDecl
from flyconfigs.registry.search.matching import nearest_matches
from flyconfigs.registry.search.ties import Tie, has_own_tie_rank
from flyconfigs.registry.sources.entries import Entry, Source
from flyconfigs.registry.sources.tables import TableRef
from flyconfigs.schema.table import Table
from tests.vllm_corpus import CONFIGS, config_files, probe_sizes, vllm_pick, vllm_table

UNSORTED = ["E=16,N=3200,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json",
            "E=16,N=6400,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json",
            "E=16,N=800,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"]
"""The files of vLLM 0.34.0 whose batch sizes are not ascending."""
DOWN = ["E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128]_down.json",
        "E=256,N=512,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128]_down.json"]
"""Files imported as a table and artifacts beside it (their ``{"USE_TMA": false}`` entries)."""
N3200 = CONFIGS / UNSORTED[0]


def _ties(table: dict[int, Any], top: int) -> dict[int, tuple[int, int]]:
    """By brute force, every batch size up to ``top`` where two of ``table``'s are
    equally nearest, with the two."""
    out = {}
    for m in range(1, top + 1):
        best = min(abs(t - m) for t in table)
        tied = sorted(t for t in table if abs(t - m) == best)
        if len(tied) == 2:
            out[m] = (tied[0], tied[1])
    return out


def test_three_files_list_their_batch_sizes_out_of_order_and_vllm_breaks_ties_by_it() -> None:
    unsorted = [p.name for p in config_files() if list(vllm_table(p)) != sorted(vllm_table(p))]
    assert sorted(unsorted) == sorted(UNSORTED)
    larger = 0
    for name in UNSORTED:
        table = vllm_table(CONFIGS / name)
        for m, (low, high) in _ties(table, max(table)).items():
            order = list(table)
            assert vllm_pick(table, m) == (low if order.index(low) < order.index(high) else high)
            larger += vllm_pick(table, m) == high
    assert larger == 23  # where the smaller key would be the wrong answer


@pytest.mark.parametrize("name", [*UNSORTED, *DOWN])
def test_the_probe_sizes_hold_every_tie_and_both_its_neighbours(name: str) -> None:
    table = vllm_table(CONFIGS / name)
    probes = set(probe_sizes(list(table)))
    ties = _ties(table, max(table) + 1)
    assert ties and all({m - 1, m, m + 1} <= probes for m in ties)


def test_the_probe_sizes_of_every_file_hold_both_sides_of_every_midpoint_and_every_tie() -> None:
    midpoints = 0
    for path in config_files():
        table = vllm_table(path)
        probes = set(probe_sizes(list(table)))
        for a in table:
            for b in table:
                if a < b and not any(a < t < b for t in table):  # neighbours, whatever the file's order
                    low, high = (a + b) // 2, (a + b + 1) // 2  # equal when the midpoint is a tie
                    assert {a, b, low, high} <= probes, (path.name, a, b)
                    if low == high:
                        assert {low - 1, low + 1} <= probes, (path.name, a, b)
                    midpoints += 1
    assert midpoints == 6066 - 340  # every entry but each file's largest starts one


def test_every_committed_table_keeps_its_upstream_files_order() -> None:
    root = Path(__file__).parents[1] / "artifacts"
    checked = 0
    for path in sorted(root.glob("vllm-fused-moe-*/*-table-*.json")):
        table = json.loads(path.read_text())
        upstream = CONFIGS / Path(table["provenance"]["source"]["file"]).name
        at = table["columns"]["key"].index("M")
        assert [row[at] for row in table["rows"]] == [m for m in vllm_table(upstream) if f'"{m}"' in table["entries"]]
        checked += 1
    assert checked == 340


def _imported(tmp_path: Path, names: list[str]) -> Resolver:
    assert main(["import", "vllm", *(str(CONFIGS / n) for n in names), "--out", str(tmp_path)]) == 0
    return Resolver(paths=[str(tmp_path)], detector=None)


def test_a_resolver_serves_vllms_entry_at_every_tie_of_the_out_of_order_and_down_files(tmp_path: Path) -> None:
    resolver = _imported(tmp_path, [*UNSORTED, *DOWN])
    pairs, wrong = 0, []
    for name in [*UNSORTED, *DOWN]:
        named, table = parse_file_name(name), vllm_table(CONFIGS / name)
        raw = json.loads((CONFIGS / name).read_text())
        for m in probe_sizes(list(table)):
            served = resolver.resolve(named.decl.name, {**named.axes, "M": m}, device=named.device_name)
            theirs = vllm_pick(table, m)
            pairs += 1
            if served.matched_key is None or (served.matched_key["M"], dict(served.config)) != (theirs, raw[str(theirs)]):
                wrong.append((name, m, theirs))
    assert wrong == [] and pairs > 200


def test_the_committed_package_serves_vllms_entry_at_an_out_of_order_tie() -> None:
    resolver = Resolver(paths=[str(Path(__file__).parents[1] / "artifacts" / "vllm-fused-moe-sm90")], detector=None)
    named = parse_file_name(N3200.name)
    served = resolver.resolve(named.decl.name, {**named.axes, "M": 640}, device=named.device_name)
    # 512 and 768 are both 128 away; the file lists 768 first.
    assert served.matched_key is not None and served.matched_key["M"] == 768
    assert dict(served.config) == json.loads(N3200.read_text())["768"]


def _rows(table: Table) -> list[Entry]:
    ref = TableRef(table.kernel.name, table.device.identity, "t.json", Source("override", "/t", (0, 0)), table=table)
    return ref.entries(ProblemLog())


def _vllm_rows(path: Path) -> list[Entry]:
    (table,) = tabulated(import_vllm_file(path)).tables
    assert [table.key_of(i)["M"] for i in range(len(table.rows))] == list(vllm_table(path))  # the file's order
    return _rows(table)


class _KeyOrder(VLLMFusedMoESpec):
    """vLLM's family with the contract's default ``tie_rank``."""

    tie_rank = KernelDecl.tie_rank


class _Raising(VLLMFusedMoESpec):
    def tie_rank(self, asked: Mapping[str, Any], tie: Tie) -> tuple[float, ...]:
        raise RuntimeError("no")


class _NotNumbers(VLLMFusedMoESpec):
    def tie_rank(self, asked: Mapping[str, Any], tie: Tie) -> tuple[float, ...]:
        return ("first",)  # type: ignore[return-value]


@pytest.fixture
def declared() -> Iterator[None]:
    yield
    unregister_kernel("vllm_fused_moe")


def test_equally_near_rows_of_one_table_are_ranked_in_row_order() -> None:
    rows = _vllm_rows(N3200)
    key = {**parse_file_name(N3200.name).axes, "M": 640}
    # 768 and 512 are 128 away, 1024 and 256 384: each pair as the file lists it.
    assert [e.key["M"] for e in nearest_matches(rows, key, SPEC)][:4] == [768, 512, 1024, 256]
    # Reversed rows: the other one first, whatever the keys.
    (table,) = tabulated(import_vllm_file(N3200)).tables
    backwards = _rows(table.model_copy(update={"rows": table.rows[::-1], "entries": None}))
    assert [e.key["M"] for e in nearest_matches(backwards, key, SPEC)][:2] == [512, 768]


def test_rows_of_another_table_or_an_artifact_beside_it_keep_key_distances_order() -> None:
    first, second = _vllm_rows(N3200), _vllm_rows(N3200)
    key = {**parse_file_name(N3200.name).axes, "M": 640}
    # Two tables of one standing: each keeps its own row order among the places its rows
    # hold (the first table's 768, then the second's 512, ...), never one table's row 3
    # against the other's row 11.
    one = [e for e in first if e.key["M"] == 512]
    other = [e for e in second if e.key["M"] == 768]
    assert [e.key["M"] for e in nearest_matches([*one, *other], key, SPEC)] == [512, 768]
    artifact = Entry(SPEC.name, dict(first[0].key) | {"M": 768}, first[0].device, "/t/a.json",
                     Source("override", "/t", (0, 0)))
    assert [e.key["M"] for e in nearest_matches([*one, artifact], key, SPEC)] == [512, 768]


class _Recording(VLLMFusedMoESpec):
    """vLLM's family keeping every tie it is asked to rank, and ranking them all equal."""

    def __init__(self) -> None:
        self.seen: list[Tie] = []

    def tie_rank(self, asked: Mapping[str, Any], tie: Tie) -> tuple[float, ...]:
        self.seen.append(tie)
        return (0.0,)


def test_a_tie_shows_its_file_and_row_equal_ranks_keep_the_default_order_and_nothing_is_read() -> None:
    first, second = _vllm_rows(N3200), _vllm_rows(N3200)
    key = {**parse_file_name(N3200.name).axes, "M": 640}
    artifact = Entry(SPEC.name, dict(first[0].key) | {"M": 768}, first[0].device, "/t/a.json",
                     Source("override", "/t", (0, 0)))
    pool = [*(e for e in first if e.key["M"] in (512, 768)), artifact, *(e for e in second if e.key["M"] == 512)]
    family = _Recording()
    # Equal ranks: key_distance's order (512s before 768s), then the pool's.
    assert [id(e) for e in nearest_matches(pool, key, family)][:4] == [id(pool[i]) for i in (1, 3, 0, 2)]
    rows = {e.key["M"]: i for i, e in enumerate(first)}
    # Files are numbered in the order the default meets them: the first table, the
    # second, the artifact file; a row says where it sits in its table.
    assert [(t.key["M"], t.file, t.row) for t in family.seen[:4]] == \
        [(512, 0, rows[512]), (512, 1, rows[512]), (768, 0, rows[768]), (768, 2, None)]
    assert all(t.distance[0] == 128 for t in family.seen[:4])
    # vLLM's rank reads no artifact: the loose one's (no such file) would be reported.
    problems = ProblemLog()
    nearest_matches(pool, key, SPEC, problems)
    assert problems.problems() == []
    assert family.seen[3].artifact is None  # read on first use: /t/a.json does not exist


@pytest.mark.parametrize("decl", [_KeyOrder(), _Raising(), _NotNumbers()])
def test_without_the_member_or_when_it_fails_a_tie_goes_to_the_smaller(tmp_path: Path, declared: None,
                                                                       decl: KernelDecl) -> None:
    register_kernel(decl)
    resolver = _imported(tmp_path, [UNSORTED[0]])
    named = parse_file_name(N3200.name)
    for _ in range(2):
        served = resolver.resolve(named.decl.name, {**named.axes, "M": 640}, device=named.device_name)
        assert served.matched_key is not None and served.matched_key["M"] == 512
    said = [p.message for p in resolver.problems.problems() if "tie_rank" in p.message]
    if isinstance(decl, _KeyOrder):
        assert said == []
    else:
        why = "raised RuntimeError: no" if isinstance(decl, _Raising) else "raised TypeError"
        assert len(said) == 1 and said[0].startswith(f"tie_rank {why}")
        assert said[0].endswith("equally near keys keep key_distance's order")


def test_rmsnorm_keeps_its_rule_a_tie_to_the_larger_whatever_the_row_order() -> None:
    key = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
    for order in ([2048, 8192], [8192, 2048]):
        table, left = as_table([make_artifact(device=MI300X, key={**key, "M": m}) for m in order], "rmsnorm.json")
        assert table is not None and left == []
        assert [e.key["M"] for e in nearest_matches(_rows(table), key, rmsnorm.SPEC)] == [8192, 2048]
    assert not has_own_tie_rank(rmsnorm.SPEC)
