"""A table stands in a catalog index as one block, and its rows still take part in the two
rules of the nearest-key step that look past a key's exact axes: a family's
``relaxed_axes`` (the rows a miss weighs include the rows that differ from the asked key
on a relaxed axis, and only those besides the rows of its exact axes) and its
``tie_rank`` (each row made an entry from a block keeps its table, one file number for
all its rows, and its row index there)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiter_corpus import CORPUS, REVISION
from flyconfigs.adapters.aiter import import_aiter_file
from flyconfigs.adapters.vllm import import_vllm_file, parse_file_name, tabulated
from flyconfigs.kernels.aiter_gemm import FMOE
from flyconfigs.kernels.vllm_fused_moe import VLLMFusedMoESpec
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.resolve import Resolver
from flyconfigs.registry.search.matching import Pool, nearest_matches, relaxed_axes
from flyconfigs.registry.search.ties import Tie
from flyconfigs.registry.sources.blocks import TableBlock
from flyconfigs.registry.sources.entries import Source
from flyconfigs.registry.sources.tables import TableRef
from flyconfigs.schema import write_atomic
from test_vllm_ties import N3200

DS_V3 = CORPUS / "aiter" / "configs" / "model_configs" / "a8w8_blockscale_tuned_fmoe_ds_v3.csv"
# One shape of ds_v3 (gfx942, 80 CUs, one token) tuned for Silu only.
SHAPE = {"cu_num": 80, "token": 1, "model_dim": 7168, "inter_dim": 256, "expert": 256, "topk": 8,
         "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fnuz", "q_dtype_w": "torch.float8_e4m3fnuz",
         "q_type": "QuantType.per_Token", "use_g1u1": 1, "doweight_stage1": 0}


def test_a_miss_weighs_a_tables_rows_that_differ_only_on_a_relaxed_axis_and_no_others(tmp_path: Path) -> None:
    for table in import_aiter_file(DS_V3, REVISION).tables:
        write_atomic(tmp_path / table.file_name(), table.to_json_bytes())
    resolver = Resolver(paths=[str(tmp_path)], detector=None)
    asked = {**SHAPE, "act_type": "ActivationType.Swiglu"}  # no row has it
    served = resolver.resolve("aiter_fmoe", asked, "gfx942:80:AMD Instinct MI308X")
    assert served.key_match == "nearest" and served.matched_key is not None
    assert served.matched_key["act_type"] == "ActivationType.Silu"
    relaxed = relaxed_axes(FMOE)
    exact = [a.name for a in FMOE.key_axes if not a.ordinal and a.name not in relaxed]
    assert relaxed == {"act_type"} and exact
    made = [entry for ref in resolver._catalog.tables_for("gfx942") for entry in ref._made.values()]
    # The rows made entries share the asked key's exact axes but the relaxed one; without
    # relaxed_axes none of them would have been weighed (no row has Swiglu).
    # (flydsl_fallback, an axis the family fills in for the asked key, is one value here).
    assert made and all(e.key[n] == asked[n] for e in made for n in exact if n in asked)
    assert len({e.key.get("flydsl_fallback") for e in made}) == 1
    assert served.matched_key["act_type"] in {e.key["act_type"] for e in made} - {asked["act_type"]}
    rows = sum(len(ref.table.rows) for ref in resolver._catalog.tables_for("gfx942") if ref.table is not None)
    assert len(made) < rows / 10, "a miss made entries of rows of other shapes"
    assert resolver.problems.problems() == []


class _Recording(VLLMFusedMoESpec):
    """vLLM's family keeping every tie it is asked to rank, ranking them by file order."""

    def __init__(self) -> None:
        self.seen: list[Tie] = []

    def tie_rank(self, asked: Mapping[str, Any], tie: Tie) -> tuple[float, ...]:
        self.seen.append(tie)
        return super().tie_rank(asked, tie)


def test_rows_matched_through_a_block_keep_their_table_and_row_index_in_a_tie() -> None:
    (table,) = tabulated(import_vllm_file(N3200)).tables
    source = Source("override", "/t", (0, 0))
    ref = TableRef(table.kernel.name, table.device.identity, "t.json", source, table=table)
    # The block as a family's ranking of its source offers it: its entries are copies.
    block = TableBlock(ref, source, ProblemLog()).ranked(Source("override", "/t", (0, 1)))
    family = _Recording()
    key = {**parse_file_name(N3200.name).axes, "M": 640}
    served = nearest_matches(Pool([block]), key, family)
    # 768 and 512 are both 128 away: vLLM's file lists 768 first, then 512.
    assert [e.key["M"] for e in served][:2] == [768, 512]
    row_of = {table.key_of(i)["M"]: i for i in range(len(table.rows))}
    seen = {t.key["M"]: (t.file, t.row) for t in family.seen}
    assert seen[768] == (0, row_of[768]) and seen[512] == (0, row_of[512])
    assert row_of[768] < row_of[512]
    assert all(e.place() == (id(ref), row_of[e.key["M"]]) for e in served)
