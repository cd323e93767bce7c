"""The fused add + RMSNorm op on the GPU: every dtype pair over hidden sizes against the
float64 reference and the residual against a torch add, for both implementations (the
Triton kernel and the RMSNorm source's fused kernel), every Triton config and a spread of
the source configs of the space on a few keys, a served source config (and the fallback
where its vectors do not fit the tensors), odd layouts, torch.compile (no graph break,
also with ``mode="reduce-overhead"``), CUDA-graph capture, and the tuner loading it by
name."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from flyconfigs.kernels import fused_add_rms_norm  # noqa: E402
from flyconfigs.kernels.fused_add_rmsnorm import SPEC, reference_fused_add_rms_norm  # noqa: E402
from flyconfigs.kernels.fused_add_rmsnorm.op import FusedAddRMSNormWorkload, launch  # noqa: E402
from flyconfigs.kernels.rmsnorm import SPEC as RMSNORM  # noqa: E402
from flyconfigs.kernels.torch_dtypes import TORCH_DTYPES  # noqa: E402
from flyconfigs.registry import DeviceQuery  # noqa: E402
from flyconfigs.schema import load_artifact  # noqa: E402

DT = TORCH_DTYPES
PAIRS = [("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp16"), ("fp32", "fp32")]
NS = [1, 7, 128, 1000, 3584, 8192, 12288, 16384, 20000]
MS = [1, 3, 257]
TOL = {"bf16": (1.6e-2, 1e-2), "fp16": (2e-3, 2e-3), "fp32": (2e-5, 2e-5)}


def _inputs(shape: tuple[int, ...], dtype: str, wdtype: str, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(*shape, device="cuda", generator=g).to(DT[dtype])
    r = (torch.randn(*shape, device="cuda", generator=g) * 2).to(DT[dtype])
    w = (torch.rand(shape[-1], device="cuda", generator=g) + 0.5).to(DT[wdtype])
    return x, r, w


def _assert_result(y: torch.Tensor, r_after: torch.Tensor, x: torch.Tensor, r_before: torch.Tensor,
                   w: torch.Tensor, dtype: str) -> None:
    expected_r, expected_y = reference_fused_add_rms_norm(x, r_before, w, 1e-6)
    assert torch.equal(r_after, expected_r), "the residual must be exactly x + residual in its dtype"
    assert not torch.isnan(y).any()
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(y.double(), expected_y, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype,wdtype", PAIRS)
def test_every_shape_against_the_reference(dtype: str, wdtype: str) -> None:
    for seed, (n, m) in enumerate(itertools.product(NS, MS)):
        x, r, w = _inputs((m, n), dtype, wdtype, seed)
        before = r.clone()
        y = fused_add_rms_norm(x, r, w, 1e-6)
        _assert_result(y, r, x, before, w, dtype)


@pytest.mark.parametrize("m,n,dtype", [(5, 128, "bf16"), (64, 4096, "bf16"), (3, 16384, "fp16"), (33, 12288, "bf16"),
                                       (96, 4352, "bf16"), (3, 2880, "fp16"), (7, 1600, "bf16")])
def test_every_config_of_the_space(m: int, n: int, dtype: str) -> None:
    key = {"M": m, "N": n, "dtype": dtype, "weight_dtype": dtype}
    space = SPEC.space(key, DeviceQuery("nvidia", "sm90"))
    triton = [c for c in space if c["impl"] == "triton"]
    source = [c for c in space if c["impl"] == "source"]
    assert len(triton) >= 3 and len(source) >= 3
    # Every Triton config, and source configs spread over the space (each compiles
    # afresh with NVRTC; the tuner checks every one it times against the reference).
    # Every config is run and each one that is wrong is named, not only the first.
    step = max(1, len(source) // 24)
    wrong: list[str] = []
    for config in triton + source[::step] + source[-1:]:
        x, r, w = _inputs((m, n), dtype, dtype, 1)
        before, y = r.clone(), torch.full_like(x, float("nan"))
        launch(x, r, w, y, 1e-6, config)
        try:
            _assert_result(y, r, x, before, w, dtype)
        except AssertionError as exc:
            wrong.append(f"{config}: {str(exc).splitlines()[0]} {' '.join(str(exc).split()[-14:])}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("dtype,wdtype", PAIRS)
def test_the_source_implementation_against_the_reference(dtype: str, wdtype: str) -> None:
    """RMSNorm's default config for each key run as the fused source kernel: rows held in
    registers, in shared memory or re-read, scalar rows (odd N) and clusters (long rows)."""
    device = DeviceQuery("nvidia", "sm90")
    for seed, (n, m) in enumerate(itertools.product(NS, MS)):
        key = RMSNORM.check_key({"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype})
        configs = [RMSNORM.default_config(key, device)]
        configs += [c for c in RMSNORM.space(key, device) if c["row_storage"] != "reg" or c["cluster"] != 1][:2]
        for config in configs:
            x, r, w = _inputs((m, n), dtype, wdtype, seed)
            before, y = r.clone(), torch.full_like(x, float("nan"))
            launch(x, r, w, y, 1e-6, {"impl": "source", **config})
            _assert_result(y, r, x, before, w, dtype)


def _serve_source_default(key: dict[str, object], folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Serve RMSNorm's default for ``key`` on this GPU as a ``source`` config of the fused
    family (a 16-byte vector config), from an artifact in ``folder`` on FLYCONFIGS_PATH."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from factories import artifact_dict
    from flyconfigs.gpu import get_backend
    from flyconfigs.registry import refresh
    from flyconfigs.schema import Artifact, write_atomic

    device = get_backend().device()
    config = {"impl": "source", **RMSNORM.default_config(key, DeviceQuery.of(device.identity))}
    assert config["vector_bytes"] == 16
    data = artifact_dict(device=device.model_dump(mode="json"), key=key, kernel="fused_add_rmsnorm", n_candidates=1)
    data["candidates"][0]["config"] = data["winner"]["config"] = data["default"]["config"] = config
    artifact = Artifact.model_validate(data)
    write_atomic(folder / artifact.file_name(), artifact.to_json_bytes())
    monkeypatch.setenv("FLYCONFIGS_PATH", str(folder))
    refresh()
    return config


def test_a_served_source_config_runs_and_misaligned_tensors_fall_back(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from flyconfigs.registry import resolve

    key = {"M": 64, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
    config = _serve_source_default(key, tmp_path, monkeypatch)
    served = resolve("fused_add_rmsnorm", key)
    assert (served.source, dict(served.config)) == ("override", config)
    x, r, w = _inputs((64, 4096), "bf16", "bf16", 8)
    before = r.clone()
    y = fused_add_rms_norm(x, r, w, 1e-6)
    _assert_result(y, r, x, before, w, "bf16")
    # Rows of x that start 2 bytes off a 16-byte boundary: the source config's vectors
    # cannot load them, and the call runs the family's default instead, correctly.
    big, r2, _ = _inputs((64, 4097), "bf16", "bf16", 9)
    shifted = big[:, 1:]
    r2 = r2[:, :4096].contiguous()
    before = r2.clone()
    y = fused_add_rms_norm(shifted, r2, w, 1e-6)
    _assert_result(y, r2, shifted, before, w, "bf16")


def test_a_layout_seen_before_takes_the_prepared_path_and_still_checks_each_call(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The eager hot path launches a remembered layout's prepared kernel without the
    input rules; the addresses' alignment, eps and aliasing are still checked on every
    call, and a registry change (another config served) makes a new plan."""
    from flyconfigs.kernels.fused_add_rmsnorm import op as fused_op
    from flyconfigs.registry import refresh

    key = {"M": 16, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
    config = _serve_source_default(key, tmp_path, monkeypatch)
    fused_op._LAYOUTS.clear()
    x, r, w = _inputs((16, 4096), "bf16", "bf16", 11)
    before = r.clone()
    y = fused_add_rms_norm(x, r, w, 1e-6)  # every rule checked; the layout is remembered
    _assert_result(y, r, x, before, w, "bf16")
    assert len(fused_op._LAYOUTS) == 1
    seen = next(iter(fused_op._LAYOUTS.values()))
    assert seen.plan.prepared is not None and seen.plan.config == config
    for seed in (12, 13):  # the hot path, new tensors of the same layout
        x, r, w = _inputs((16, 4096), "bf16", "bf16", seed)
        before = r.clone()
        y = fused_add_rms_norm(x, r, w, 1e-6)
        _assert_result(y, r, x, before, w, "bf16")
    # The same shape and strides 2 bytes off a 16-byte boundary: the vectors cannot load
    # them; the call leaves the hot path and runs the family's default, correctly.
    flat = torch.randn(16 * 4096 + 8, device="cuda").to(torch.bfloat16)
    shifted = flat[1:1 + 16 * 4096].view(16, 4096)
    assert (shifted.shape, shifted.stride()) == (x.shape, x.stride())
    r = torch.randn(16, 4096, device="cuda").to(torch.bfloat16)
    before = r.clone()
    y = fused_add_rms_norm(shifted, r, w, 1e-6)
    _assert_result(y, r, shifted, before, w, "bf16")
    for eps in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="eps"):
            fused_add_rms_norm(x, r, w, eps)
    out = torch.empty_like(x)
    fused_add_rms_norm(x, r, w, 1e-6, out=out)
    with pytest.raises(ValueError, match="out must not be"):
        fused_add_rms_norm(x, r, w, 1e-6, out=r)
    # Without the override the registry serves something else: a new plan, not the old one.
    monkeypatch.delenv("FLYCONFIGS_PATH")
    refresh()
    x, r, w = _inputs((16, 4096), "bf16", "bf16", 14)
    before = r.clone()
    y = fused_add_rms_norm(x, r, w, 1e-6)
    _assert_result(y, r, x, before, w, "bf16")
    assert all(layout.plan.generation == fused_op._RESOLVER.generation for layout in fused_op._LAYOUTS.values())


def test_odd_layouts_3d_strided_rows_and_out() -> None:
    x, r, w = _inputs((4, 5, 3584), "bf16", "bf16", 3)
    before = r.clone()
    out = torch.empty_like(x)
    assert fused_add_rms_norm(x, r, w, 1e-6, out=out) is out
    _assert_result(out, r, x, before, w, "bf16")
    big = torch.randn(6, 8192, device="cuda").to(torch.bfloat16)
    xs = big[:, :4096]  # rows strided by 8192
    rs = torch.randn(6, 4096, device="cuda").to(torch.bfloat16).t().contiguous().t()  # columns not contiguous
    before = rs.clone()
    w4 = (torch.rand(4096, device="cuda") + 0.5).to(torch.bfloat16)
    y = fused_add_rms_norm(xs, rs, w4, 1e-6)
    _assert_result(y, rs, xs, before, w4, "bf16")
    x3, r3, w3 = _inputs((2, 3, 1024), "bf16", "bf16", 6)
    with pytest.raises(TypeError, match="residual must be"):
        fused_add_rms_norm(x3, r3.float(), w3)
    with pytest.raises(ValueError, match="weight must be"):
        fused_add_rms_norm(x3, r3, w3[:10])
    with pytest.raises(ValueError, match="out must not be"):
        fused_add_rms_norm(x3, r3, w3, out=r3)


# torch's CUDA-graph tree manager captures an empty graph of its own when it starts.
@pytest.mark.filterwarnings("default:The CUDA Graph is empty:UserWarning")
def test_torch_compile_without_graph_break_and_with_reduce_overhead() -> None:
    import torch._dynamo

    def layer(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return fused_add_rms_norm(x * 2, r, w, 1e-6) + 1

    x, r, w = _inputs((64, 4096), "bf16", "bf16", 4)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(layer)(x, r.clone(), w)
    assert explained.graph_break_count == 0, explained.break_reasons
    for mode in (None, "reduce-overhead"):
        compiled = torch.compile(layer, fullgraph=True, mode=mode)
        for _ in range(3):
            r1, r2 = r.clone(), r.clone()
            got = compiled(x, r1, w)
            want = fused_add_rms_norm(x * 2, r2, w, 1e-6) + 1
            torch.testing.assert_close(got, want)
            assert torch.equal(r1, r2), f"mode={mode}: the residual was not updated in place"


def test_cuda_graph_capture_and_replay() -> None:
    x, r, w = _inputs((256, 5120), "bf16", "bf16", 5)
    out = torch.empty_like(x)
    fused_add_rms_norm(x, r.clone(), w, 1e-6, out=out)  # compiles the variant outside capture
    start = r.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fused_add_rms_norm(x, r, w, 1e-6, out=out)
    r.copy_(start)
    graph.replay()
    torch.cuda.synchronize()
    _assert_result(out, r, x, start, w, "bf16")


def test_the_workload_checks_and_reports_resources() -> None:
    key = {"M": 300, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
    workload = FusedAddRMSNormWorkload(key, 2)
    source = {"impl": "source", **RMSNORM.default_config(key, DeviceQuery("nvidia", "sm90"))}
    for config in (SPEC.default_config(key, None), source):
        assert workload.check(config) is None
        resources = workload.resources(config)
        assert resources is not None and resources.registers and resources.spill_bytes == 0
    # The check starts from a fresh residual each time, whatever the last call left.
    workload.rs[0].zero_()
    assert workload.check(source) is None


def test_tune_loads_the_kernel_by_name_in_the_worker(tmp_path: Path) -> None:
    from flyconfigs.tuner.run import TuneOptions
    from flyconfigs.tuner.session import SessionRequest, run_session

    result = run_session(SessionRequest("fused_add_rmsnorm", ["M=1,4096 N=2048 dtype=bf16"], tmp_path, "cuda", [0],
                                        options=TuneOptions(budget=6)))
    assert result.summary["tuned"] == 2
    for path in result.summary["artifacts"]:
        artifact = load_artifact(Path(path))
        assert artifact.kernel.name == "fused_add_rmsnorm" and artifact.provenance.backend == "cuda"
        assert "triton" in artifact.provenance.backend_versions
        ok = [c for c in artifact.candidates if c.status == "ok"]
        assert ok and all(c.timing and c.resources and c.resources.registers for c in ok)


def test_a_served_triton_config_is_launched_directly_after_its_first_call(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A Triton config's eager calls after the first go through Triton's launcher with the
    kernel the first call compiled: same results as the JIT's launch, for new tensors of
    the layout, and the JIT's launch again for addresses the kernel was not specialized on."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from factories import artifact_dict
    from flyconfigs.gpu import get_backend
    from flyconfigs.kernels.fused_add_rmsnorm import op as fused_op
    from flyconfigs.registry import refresh
    from flyconfigs.schema import Artifact, write_atomic

    key = {"M": 8, "N": 4352, "dtype": "bf16", "weight_dtype": "bf16"}
    config = {"impl": "triton", "block_n": 4096, "rows_per_program": 1, "num_warps": 8, "num_stages": 1,
              "row_tiles": 2, "eviction": "stream", "weight_load": "early"}
    device = get_backend().device()
    data = artifact_dict(device=device.model_dump(mode="json"), key=key, kernel="fused_add_rmsnorm", n_candidates=1)
    data["candidates"][0]["config"] = data["winner"]["config"] = data["default"]["config"] = config
    artifact = Artifact.model_validate(data)
    write_atomic(tmp_path / artifact.file_name(), artifact.to_json_bytes())
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path))
    refresh()
    fused_op._LAYOUTS.clear()
    x, r, w = _inputs((8, 4352), "bf16", "bf16", 21)
    before = r.clone()
    y = fused_add_rms_norm(x, r, w, 1e-6)
    _assert_result(y, r, x, before, w, "bf16")
    (seen,) = fused_op._LAYOUTS.values()
    assert seen.plan.config == config and seen.triton is not None
    calls = []
    original = type(seen.triton).__call__
    monkeypatch.setattr(type(seen.triton), "__call__", lambda self, *a: (calls.append(1), original(self, *a))[1])
    for seed in (22, 23):
        x, r, w = _inputs((8, 4352), "bf16", "bf16", seed)
        before = r.clone()
        y = fused_add_rms_norm(x, r, w, 1e-6)
        torch.cuda.synchronize()
        _assert_result(y, r, x, before, w, "bf16")
    assert len(calls) == 2
    flat = torch.randn(8 * 4352 + 8, device="cuda").to(torch.bfloat16)
    shifted = flat[1:1 + 8 * 4352].view(8, 4352)
    r = torch.randn(8, 4352, device="cuda").to(torch.bfloat16)
    before = r.clone()
    y = fused_add_rms_norm(shifted, r, w, 1e-6)
    _assert_result(y, r, shifted, before, w, "bf16")
    assert len(calls) == 2, "misaligned: the JIT's launch"
