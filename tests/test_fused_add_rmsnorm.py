"""The fused add + RMSNorm family on the CPU: its declaration through the entry point,
its space and validity rules, the Triton helper serving a tuned config (and refusing an
invalid one), and the kernel-agnostic tuner on it with the test backend.  The Triton
kernel itself runs only on a GPU (tests/gpu/test_fused_add_rmsnorm_gpu.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factories import H200, artifact_dict
from flyconfigs.cli import main
from flyconfigs.errors import InvalidKeyError
from flyconfigs.kernels.fused_add_rmsnorm import SPEC, traffic_bytes
from flyconfigs.kernels.fused_add_rmsnorm.declaration import TRITON_TUNABLES
from flyconfigs.kernels.plugin import TunableKernel, tunable_kernel
from flyconfigs.kernels.rmsnorm import SPEC as RMSNORM
from flyconfigs.kernels.triton_config import TritonConfigs
from flyconfigs.registry import DeviceQuery, default_resolver, kernel_declaration
from flyconfigs.registry.declarations import check_config
from flyconfigs.schema import load_artifact, write_atomic
from flyconfigs.tuner.grid import parse_grids

SM90 = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())
KEY = {"M": 4096, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
CONSTANTS = {"block_n": "BLOCK_N", "rows_per_program": "ROWS", "num_stages": "STAGES"}


def test_declared_through_the_entry_point_and_tunable() -> None:
    decl = kernel_declaration("fused_add_rmsnorm")
    assert decl is SPEC and isinstance(decl, TunableKernel) and tunable_kernel("fused_add_rmsnorm") is SPEC
    assert [a.name for a in SPEC.key_axes] == ["M", "N", "dtype", "weight_dtype"]
    assert len(SPEC.source_sha256()) == 64
    assert SPEC.traffic(KEY) == traffic_bytes(4096, 4096, "bf16", "bf16") == 4 * 4096 * 4096 * 2 + 4096 * 2


def test_every_config_of_the_hidden_size_grid_is_valid_and_the_default_is_among_them() -> None:
    keys = parse_grids(["hidden"], SPEC)
    assert len(keys) == 16 * 17 + 16 * 5 * 2
    assert {k["weight_dtype"] for k in keys if k["dtype"] == "fp16"} == {"fp16"}
    for index, key in enumerate(keys):
        space = SPEC.space(key, SM90)
        default = SPEC.default_config(key, SM90)
        triton = [c for c in space if c["impl"] == "triton"]
        assert default in triton and 1 <= len(triton) <= 64, key
        source = [c for c in space if c["impl"] == "source"]
        assert source, key
        if index % 8 == 0:  # searched exactly as RMSNorm searches its source (on a spread of keys)
            assert source == [{"impl": "source", **c} for c in RMSNORM.space(key, SM90)]
        for config in space:
            assert check_config(SPEC, config, key, SM90) is None, (key, config)
            held = TRITON_TUNABLES if config["impl"] == "triton" else RMSNORM.tunables
            assert set(config) == {"impl", *held}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"num_warps": True}, "num_warps=True"),
        ({"num_warps": 3}, "num_warps=3"),
        ({"block_n": 8192}, "wider than the row"),
        ({"block_n": 1024, "rows_per_program": 2}, "one row per program"),
        ({"num_stages": 2}, "no loop to pipeline"),
        ({"rows_per_program": 16, "block_n": 4096}, "exceeds"),
        ({"num_warps": 1}, "elements per thread"),
    ],
)
def test_check_config_says_why_a_config_cannot_run(change: dict[str, Any], why: str) -> None:
    config = {**SPEC.default_config(KEY, SM90), **change}
    problem = check_config(SPEC, config, KEY, SM90)
    assert problem is not None and why in problem


MI300X = DeviceQuery("amd", "gfx942", "AMD Instinct MI300X", 304, ("sramecc+", "xnack-"))


def test_the_default_passes_the_check_for_every_row_on_every_device() -> None:
    # Rows shorter than the narrowest block (32) and rows of more than 64 chunks of 4096
    # were served defaults the check refuses.
    rows = [*range(1, 70), 1000, 1001, 4097, 16383, 262145, 500000, 1 << 20]
    for device in (SM90, MI300X, None):
        for n in rows:
            for m in (1, 3, 77, 65535):
                key = SPEC.check_key({"M": m, "N": n, "dtype": "bf16", "weight_dtype": "bf16"})
                default = SPEC.default_config(key, device)
                assert SPEC.check_config(default, key, device) is None, (n, m, device, default)
                assert default in SPEC.space(key, device)


def test_rows_no_config_runs_are_refused_as_keys() -> None:
    with pytest.raises(InvalidKeyError, match="must be <= 1048576"):
        SPEC.check_key({**KEY, "N": (1 << 20) + 1})


def test_a_program_of_more_than_1024_threads_is_refused_where_waves_are_64_wide() -> None:
    config = {"block_n": 16384, "rows_per_program": 1, "num_warps": 32, "num_stages": 1}
    key = {**KEY, "N": 16384}
    assert SPEC.check_config(config, key, SM90) is None
    why = SPEC.check_config(config, key, MI300X)
    assert why is not None and "32 warps of 64 threads exceed 1024" in why
    assert all(c["num_warps"] * 64 <= 1024 for c in SPEC.space(key, MI300X) if c["impl"] == "triton")


def test_keys_are_typed_by_the_declaration() -> None:
    for bad in ({**KEY, "M": True}, {**KEY, "N": 4096.0}, {**KEY, "weight_dtype": "fp16"}, {**KEY, "N": 1 << 22}):
        with pytest.raises(InvalidKeyError):
            SPEC.check_key(bad)


def _override(folder: Path, winner: dict[str, Any], key: dict[str, Any] = KEY) -> None:
    data = artifact_dict(device=H200, key=key, kernel="fused_add_rmsnorm", n_candidates=2)
    default = SPEC.default_config(key, SM90)
    data["candidates"][0]["config"] = winner
    data["candidates"][1]["config"] = default
    data["winner"]["config"] = winner
    data["default"]["config"] = default
    data["kernel"]["source_sha256"] = SPEC.source_sha256()
    folder.mkdir(exist_ok=True)
    write_atomic(folder / "fused.json", (json.dumps(data) + "\n").encode())


def test_the_triton_helper_serves_a_tuned_config_as_kernel_arguments(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    winner = {"block_n": 4096, "rows_per_program": 1, "num_warps": 8, "num_stages": 1}
    _override(tmp_path / "o", winner)
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path / "o"))
    default_resolver().refresh()
    launch = TritonConfigs(SPEC, constants=CONSTANTS)(KEY, SM90)
    assert launch.resolution.source == "override" and dict(launch.config) == winner
    assert launch.kwargs == {"BLOCK_N": 4096, "ROWS": 1, "num_warps": 8, "num_stages": 1}
    assert launch.options == {"num_warps": 8, "num_stages": 1}
    assert TritonConfigs("fused_add_rmsnorm", constants=CONSTANTS)(KEY, SM90).kwargs == launch.kwargs


def test_the_triton_helper_never_serves_a_config_the_kernel_refuses(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Schema-valid, but two rows per program of a chunked row is not a config this kernel runs.
    _override(tmp_path / "o", {"block_n": 1024, "rows_per_program": 2, "num_warps": 4, "num_stages": 1})
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path / "o"))
    default_resolver().refresh()
    launch = TritonConfigs(SPEC, constants=CONSTANTS)(KEY, SM90)
    assert launch.resolution.source == "default"
    assert dict(launch.config) == SPEC.default_config(KEY, SM90)
    assert any("one row per program" in r for r in launch.resolution.reasons), launch.resolution.reasons


def test_the_tuner_tunes_it_by_name_with_the_test_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tuned"
    code = main(["tune", "fused_add_rmsnorm", "--backend", "simulated", "--key-grid", "smoke", "--out", str(out), "--json"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    assert summary["tuned"] == 4
    for path in sorted(out.glob("*.json")):
        artifact = load_artifact(path)
        assert artifact.kernel.name == "fused_add_rmsnorm" and artifact.provenance.backend == "simulated"
        assert SPEC.check_config(artifact.winner.config, artifact.key, SM90) is None
        assert len(artifact.candidates) == len(SPEC.space(artifact.key, DeviceQuery("nvidia", "simulated")))


def test_a_source_config_runs_only_where_the_tensors_allow_its_vectors() -> None:
    """The op checks the alignment a ``source`` config's vector accesses need (base
    pointers and row strides of x, residual and out, and the weight) before it launches
    it; elsewhere it runs the family's default."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from flyconfigs.kernels.fused_add_rmsnorm.workload import aligned

    key = {"M": 4, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
    source = {"impl": "source", **RMSNORM.default_config(key, SM90)}
    assert source["vector_bytes"] == 16
    x, r, y = (torch.zeros(4, 4096, dtype=torch.bfloat16) for _ in range(3))
    w = torch.ones(4096, dtype=torch.bfloat16)
    assert aligned(source, x, r, y, weight=w)
    shifted = torch.zeros(4, 4097, dtype=torch.bfloat16)[:, 1:]  # base 2 bytes off 16
    assert not aligned(source, shifted, r, y, weight=w)
    strided = torch.zeros(4, 4100, dtype=torch.bfloat16)[:, :4096]  # rows 8200 bytes apart
    assert not aligned(source, x, strided, y, weight=w)
    assert not aligned(source, x, r, y, weight=torch.ones(4097, dtype=torch.bfloat16)[1:])
    assert aligned(SPEC.default_config(key, SM90), shifted, r, y, weight=w), "a Triton config needs nothing"
    assert aligned({**source, "vector_bytes": 0}, shifted, strided, y, weight=w), "nor does the scalar source path"


def test_after_a_registry_change_every_remembered_layout_gets_a_new_plan(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The op's eager tables (plans per shape, checked layouts) hold plans of the current
    registry only: after ``refresh()`` the first call that plans anew drops every plan and
    layout of the registry before, so none keeps an old config (or its loaded kernel)
    alive, and each layout called again launches what the registry serves now.  The GPU
    is replaced by a launch that records its config (the tensors stay on the CPU)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from flyconfigs.kernels.fused_add_rmsnorm import op as fused_op
    from flyconfigs.kernels.fused_add_rmsnorm.impls import source_config

    key = {"M": 16, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
    default = SPEC.default_config(key, SM90)
    winner = {"impl": "triton", "block_n": 4096, "rows_per_program": 1, "num_warps": 8, "num_stages": 1}
    assert winner != default and source_config(default) is None
    _override(tmp_path / "o", winner, key)
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path / "o"))
    default_resolver().refresh()
    launched: list[dict[str, Any]] = []

    def fake_launch(x: Any, residual: Any, weight: Any, out: Any, eps: float, config: Any, backend: Any = None) -> None:
        launched.append(dict(config))
        residual.add_(x)
        out.copy_(residual)

    monkeypatch.setattr(fused_op, "_check", lambda *args: None)
    monkeypatch.setattr(fused_op, "launch", fake_launch)
    monkeypatch.setattr(fused_op, "device_query", lambda device: SM90)
    monkeypatch.setattr(fused_op, "_PLANS", {})
    monkeypatch.setattr(fused_op, "_LAYOUTS", {})
    x, r, w, out = (f(*shape, dtype=torch.bfloat16) for f, shape in
                    ((torch.ones, (16, 4096)), (torch.zeros, (16, 4096)), (torch.ones, (4096,)), (torch.empty, (16, 4096))))
    for _ in range(2):  # the first call checks and remembers each layout; the second takes the hot path
        fused_op.fused_add_rms_norm(x, r, w)
        fused_op.fused_add_rms_norm(x, r, w, out=out)
    assert launched == [winner] * 4 and len(fused_op._LAYOUTS) == 2
    old = fused_op._RESOLVER.generation

    monkeypatch.delenv("FLYCONFIGS_PATH")
    default_resolver().refresh()
    fused_op.fused_add_rms_norm(x, r, w)
    assert launched[4:] == [default]
    current = fused_op._RESOLVER.generation
    assert current != old
    assert [layout.plan.generation for layout in fused_op._LAYOUTS.values()] == [current]
    assert [plan.generation for plan in fused_op._PLANS.values()] == [current]
    fused_op.fused_add_rms_norm(x, r, w, out=out)
    fused_op.fused_add_rms_norm(x, r, w, out=out)
    assert launched[5:] == [default, default] and len(fused_op._LAYOUTS) == 2
    assert r.eq(7).all() and out.eq(7).all()
