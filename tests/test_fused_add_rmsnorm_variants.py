"""The fused add + RMSNorm Triton kernel's later variants on the CPU: a row walked in
chunks at any length (masked on its last chunk only), a row held as a head and a tail
(``row_tiles`` 2), cache hints (``eviction``) and the weight loaded early
(``weight_load``), each run through Triton's interpreter against the reference; the
rules that bound them; the configs tuned before them keeping their meaning; and how a
winner borrowed from a nearer key is adapted or passed over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factories import H200, artifact_dict
from triton_interpreter import use_interpreter

use_interpreter()

import torch  # noqa: E402

from flyconfigs.kernels.fused_add_rmsnorm import SPEC, reference_fused_add_rms_norm  # noqa: E402
from flyconfigs.kernels.fused_add_rmsnorm.workload import launch, triton_arguments  # noqa: E402
from flyconfigs.kernels.rmsnorm import SPEC as RMSNORM  # noqa: E402
from flyconfigs.registry import DeviceQuery, default_resolver, resolve  # noqa: E402
from flyconfigs.registry.declarations import check_config  # noqa: E402
from flyconfigs.registry.families.family import check_tunables  # noqa: E402
from flyconfigs.schema import write_atomic  # noqa: E402

SM90 = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())
MI300X = DeviceQuery("amd", "gfx942", "AMD Instinct MI300X", 304, ("sramecc+", "xnack-"))
EPS = 1e-6


def _key(m: int, n: int, dtype: str = "bf16") -> dict[str, Any]:
    return {"M": m, "N": n, "dtype": dtype, "weight_dtype": dtype}


def _shapes(key: dict[str, Any]) -> list[dict[str, Any]]:
    """One config of each distinct shape of the key's Triton space (all but the warps)."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for config in SPEC.triton_space(key, SM90):
        seen.setdefault(tuple(sorted((k, v) for k, v in config.items() if k != "num_warps")), config)
    return list(seen.values())


@pytest.mark.parametrize(("m", "n"), [(3, 4352), (5, 2880), (4, 200), (2, 4096), (1, 12288)])
def test_every_shape_of_the_space_computes_the_reference(m: int, n: int) -> None:
    # fp32 activations: the interpreter rounds a float32 sum to bf16 by truncation, so the
    # residual is compared exactly only where no rounding happens.
    key = _key(m, n, "fp32")
    g = torch.Generator().manual_seed(n)
    x = torch.randn(m, n, generator=g) * 0.1
    r0 = torch.randn(m, n, generator=g)
    w = torch.rand(n, generator=g) + 0.5
    want_r, want_y = reference_fused_add_rms_norm(x, r0, w, EPS)
    shapes = _shapes(key)
    assert {c["eviction"] for c in shapes} == {"none", "stream"}
    for config in shapes:
        r, y = r0.clone(), torch.full_like(x, float("nan"))
        launch(x, r, w, y, EPS, config)
        assert torch.equal(r, want_r), config
        err = ((y.double() - want_y).abs().max() / want_y.abs().max()).item()
        assert err < 1e-5, (config, err)


def test_strided_rows_and_several_rows_per_program_past_the_last_row() -> None:
    # 7 rows of 200 in rows 256 apart, 4 rows per program: the last program runs past the rows.
    m, n = 7, 200
    base_x, base_r, base_y = torch.randn(m, 256) * 0.1, torch.randn(m, 256), torch.full((m, 256), 7.0)
    w = torch.rand(n) + 0.5
    x, r, y = base_x[:, :n], base_r[:, :n], base_y[:, :n]
    want_r, want_y = reference_fused_add_rms_norm(x, r.clone(), w, EPS)
    config = {"block_n": 256, "rows_per_program": 4, "num_warps": 2, "num_stages": 1, "eviction": "stream",
              "weight_load": "early"}
    launch(x, r, w, y, EPS, config)
    assert torch.equal(r, want_r)
    assert ((y.double() - want_y).abs().max() / want_y.abs().max()).item() < 1e-5
    assert torch.equal(base_y[:, n:], torch.full((m, 256 - n), 7.0)), "nothing written past the row"


def test_configs_tuned_before_the_new_tunables_keep_their_meaning() -> None:
    old = {"block_n": 4096, "rows_per_program": 1, "num_warps": 16, "num_stages": 1}
    assert check_tunables(SPEC, old) is None
    assert check_tunables(SPEC, {"impl": "triton", **old}) is None
    args = triton_arguments(old, 4352)
    assert (args["TAIL"], args["HINTS"], args["W_EARLY"]) == (0, 0, 0)
    # Chunked at 4352 as it always was: two chunks, the second masked.
    assert check_config(SPEC, old, _key(96, 4352), SM90) is None
    assert SPEC.default_config(_key(96, 4352), SM90)["row_tiles"] == 1


@pytest.mark.parametrize(
    ("config", "key", "device", "why"),
    [
        ({"block_n": 8192, "row_tiles": 2}, _key(1, 4352), SM90, "block_n < N <= 2 * block_n"),
        ({"block_n": 2048, "row_tiles": 2}, _key(1, 4352), SM90, "block_n < N <= 2 * block_n"),
        ({"block_n": 4096, "eviction": "stream"}, _key(1, 4096), MI300X, "NVIDIA GPUs only"),
        ({"block_n": 4096, "row_tiles": 2, "num_stages": 2, "num_warps": 8}, _key(1, 4352), SM90,
         "no loop to pipeline"),
        # A 256-column tail under 16 warps (512 threads) is replicated across threads: its
        # reduction read one row about 2% off on an H100, now and then.
        ({"block_n": 4096, "row_tiles": 2}, _key(96, 4352), SM90, "smaller than the program's 16 warps of 32"),
        ({"block_n": 4096, "row_tiles": 2, "num_warps": 32}, _key(96, 4352), SM90, "tail tile of 1x256 elements"),
        ({"block_n": 4096, "row_tiles": 2, "rows_per_program": 4}, _key(4, 4352), SM90, "exceeds"),
    ],
)
def test_the_rules_of_the_new_variants(config: dict[str, Any], key: dict[str, Any], device: DeviceQuery,
                                       why: str) -> None:
    full = {"block_n": 4096, "rows_per_program": 1, "num_warps": 16, "num_stages": 1, **config}
    problem = check_config(SPEC, full, key, device)
    assert problem is not None and why in problem, problem


def test_the_space_chunks_any_row_and_splits_rows_that_are_not_powers_of_two() -> None:
    space = SPEC.triton_space(_key(256, 4096), SM90)
    assert {c["block_n"] for c in space if c["block_n"] < 4096} == {1024, 2048}, "chunks below 8192 columns"
    odd = SPEC.triton_space(_key(96, 4352), SM90)
    assert any(c["row_tiles"] == 2 and c["block_n"] == 4096 for c in odd), "4096 + 256 lanes"
    assert any(c["block_n"] == 256 for c in odd), "a chunk that divides 4352"
    assert any(c["weight_load"] == "early" for c in odd)
    assert all(c["eviction"] == "none" for c in SPEC.triton_space(_key(96, 4352), MI300X))
    for config in odd:
        assert check_config(SPEC, config, _key(96, 4352), SM90) is None, config


def test_adapt_config_keeps_a_whole_row_whole_and_fits_a_head_to_the_row() -> None:
    wide = {"impl": "triton", "block_n": 8192, "rows_per_program": 1, "num_warps": 16, "num_stages": 1,
            "row_tiles": 1, "eviction": "stream", "weight_load": "early"}
    assert SPEC.adapt_config(wide, _key(96, 4352), SM90) is None, "valid as it is: nothing to adapt"
    adapted = SPEC.adapt_config(wide, _key(96, 4096), SM90)
    assert adapted == {**wide, "block_n": 4096}
    split = {**wide, "block_n": 4096, "row_tiles": 2}
    assert SPEC.adapt_config(split, _key(1, 2880), SM90) == {**split, "block_n": 2048}
    assert SPEC.adapt_config(split, _key(1, 2048), SM90) == {**split, "block_n": 2048, "row_tiles": 1}
    # Where the tuned warps would leave threads without elements, the nearest that do not.
    assert SPEC.adapt_config(wide, _key(96, 256), SM90) == {**wide, "block_n": 256, "num_warps": 8}
    source = {"impl": "source", **RMSNORM.default_config(_key(1, 4096), SM90)}
    assert source["vector_bytes"] == 16
    made = SPEC.adapt_config(source, _key(1, 4100), SM90)
    assert made is not None and made["impl"] == "source" and made["vector_bytes"] == 8


def test_pass_over_a_whole_row_winner_that_would_chunk_the_asked_row() -> None:
    whole = {"impl": "triton", "block_n": 4096, "rows_per_program": 1, "num_warps": 16, "num_stages": 1}
    why = SPEC.pass_over_neighbour(_key(96, 4352), _key(128, 4096), whole, SM90)
    assert why is not None and "in chunks" in why
    assert SPEC.pass_over_neighbour(_key(96, 4000), _key(128, 4096), whole, SM90) is None
    chunked = {**whole, "block_n": 2048}
    assert SPEC.pass_over_neighbour(_key(96, 4352), _key(128, 4096), chunked, SM90) is None
    split = {**whole, "row_tiles": 2}
    assert SPEC.pass_over_neighbour(_key(96, 4352), _key(128, 5120), split, SM90) is None


def test_a_borrowed_whole_row_winner_is_not_served_as_a_two_pass_kernel(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    tuned = _key(128, 4096)
    winner = {"impl": "triton", "block_n": 4096, "rows_per_program": 1, "num_warps": 16, "num_stages": 1}
    data = artifact_dict(device=H200, key=tuned, kernel="fused_add_rmsnorm", n_candidates=2)
    default = SPEC.default_config(tuned, SM90)
    data["candidates"][0]["config"] = data["winner"]["config"] = winner
    data["candidates"][1]["config"] = data["default"]["config"] = default
    data["kernel"]["source_sha256"] = SPEC.source_sha256()
    (tmp_path / "o").mkdir()
    write_atomic(tmp_path / "o" / "fused.json", (json.dumps(data) + "\n").encode())
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path / "o"))
    default_resolver().refresh()
    near = resolve(SPEC, _key(128, 4000), SM90)
    # The winner as served: its own tunables, and the new ones at the values that keep the
    # kernel it was timed on (a config that leaves them out means exactly these).
    assert near.key_match == "nearest" and dict(near.config) in (
        winner, {**winner, "eviction": "none", "row_tiles": 1, "weight_load": "late"})
    asked = _key(96, 4352)
    served = resolve(SPEC, asked, SM90)
    assert served.source == "default" and dict(served.config) == SPEC.default_config(asked, SM90)
    assert any("in chunks" in reason for reason in served.reasons), served.reasons
