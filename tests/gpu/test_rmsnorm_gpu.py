"""RMSNorm on the GPU: every dtype pair and shape of the correctness grid against a float64
reference, every config of the space on a few shapes, torch.compile and graph capture,
and registry-driven config selection."""

from __future__ import annotations

import itertools

import pytest
import torch

from flyconfigs.gpu import get_backend
from flyconfigs.kernels import rms_norm
from flyconfigs.kernels.rmsnorm import SPEC, reference_rms_norm
from flyconfigs.kernels.rmsnorm.op import kernel_for, unload_kernels
from flyconfigs.kernels.torch_dtypes import TORCH_DTYPES
from flyconfigs.registry.sources.device import DeviceQuery

DT = TORCH_DTYPES
PAIRS = [("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp16"), ("fp16", "fp32"), ("fp32", "fp32")]
NS = [1, 7, 127, 1000, 1024, 4096, 5120, 7168, 8192, 14336, 16384, 32768]
MS = [1, 3, 64, 1000]
TOL = {"bf16": (1.6e-2, 1e-2), "fp16": (2e-3, 2e-3), "fp32": (2e-5, 2e-5)}


def _inputs(m: int, n: int, dtype: str, wdtype: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(m, n, device="cuda", generator=g) * 3).to(DT[dtype])
    w = (torch.rand(n, device="cuda", generator=g) + 0.5).to(DT[wdtype])
    return x, w


def _assert_close(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float, dtype: str) -> None:
    ref = reference_rms_norm(x, w, eps)
    assert not torch.isnan(y).any(), "unwritten (poisoned) or NaN outputs"
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(y.double(), ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype,wdtype", PAIRS)
def test_every_shape_against_float64(dtype: str, wdtype: str) -> None:
    for seed, (n, m) in enumerate(itertools.product(NS, MS)):
        x, w = _inputs(m, n, dtype, wdtype, seed)
        out = torch.full_like(x, float("nan"))
        rms_norm(x, w, 1e-6, out=out)
        _assert_close(out, x, w, 1e-6, dtype)


@pytest.mark.parametrize(
    "m,n,dtype,wdtype",
    [(3, 1000, "fp32", "fp32"), (64, 4096, "bf16", "bf16"), (5, 16384, "bf16", "fp32"), (33, 7, "fp16", "fp16"),
     (17, 5120, "fp16", "fp32"), (3, 12290, "bf16", "bf16")],
)
def test_every_config_of_the_space(m: int, n: int, dtype: str, wdtype: str) -> None:
    """The space of this device, clusters and cache hints included where it has them;
    12290 bf16 takes 4-byte vectors whose 6145 per row split unevenly over a cluster's
    blocks."""
    backend = get_backend()
    key = {"M": m, "N": n, "dtype": dtype, "weight_dtype": wdtype}
    space = SPEC.space(key, DeviceQuery.of(backend.device().identity))
    if backend.device().vendor == "nvidia" and n >= 4096:
        assert any(c["cluster"] > 1 for c in space)
    if backend.device().vendor == "nvidia" and m <= 16:
        assert any(c["cache_hints"] == "stream" for c in space)
    wave = backend.device().wave_size
    from flyconfigs.gpu import CompileRequest

    failures = [r for r in backend.compile_many(
        [CompileRequest(SPEC.source(), SPEC.entry, tuple(SPEC.defines(c, key, wave))) for c in space]
    ) if isinstance(r, Exception)]
    assert not failures, failures[0]
    x, w = _inputs(m, n, dtype, wdtype, 7)
    stream = torch.cuda.current_stream().cuda_stream
    for config in space:
        out = torch.full_like(x, float("nan"))
        grid, block, shared = SPEC.grid(config, m)
        kernel_for(backend, config, key).launch(grid, block, (x, w, out, m, n, n, 1e-5), stream, shared)
        torch.cuda.synchronize()
        try:
            _assert_close(out, x, w, 1e-5, dtype)
        except AssertionError as exc:
            raise AssertionError(f"config {config}: {exc}") from None


def test_row_strides_views_and_misaligned_pointers_take_correct_paths() -> None:
    base = torch.randn(64, 4100, device="cuda").to(torch.bfloat16)
    w = torch.rand(4096, device="cuda").to(torch.bfloat16)
    strided = base[:, :4096]
    _assert_close(rms_norm(strided, w), strided, w, 1e-6, "bf16")
    shifted = base.view(-1)[1 : 1 + 64 * 4096].view(64, 4096)
    _assert_close(rms_norm(shifted, w), shifted, w, 1e-6, "bf16")
    three_d = torch.randn(4, 8, 1024, device="cuda", dtype=torch.float16)
    w16 = torch.rand(1024, device="cuda", dtype=torch.float16)
    _assert_close(rms_norm(three_d, w16), three_d, w16, 1e-6, "fp16")
    out = torch.empty(4, 16, 1024, device="cuda", dtype=torch.float16)[:, ::2]
    rms_norm(three_d, w16, out=out)
    _assert_close(out, three_d, w16, 1e-6, "fp16")


def test_a_layout_seen_before_still_checks_what_each_call_changes() -> None:
    """The eager hot path skips the input rules for a layout of (x, weight, out) that
    passed them before; addresses and eps are still checked on every call.  A misaligned
    address takes the scalar kernel, whose sums run in another order than the vector
    kernel's, so it is compared with what the checked path gives for the same addresses,
    bit for bit, and with the reference."""
    from flyconfigs.kernels.rmsnorm import op as rmsnorm_op

    flat = torch.randn(64 * 4096 + 8, device="cuda").to(torch.bfloat16)
    w = torch.rand(4096, device="cuda").to(torch.bfloat16)
    aligned = flat[: 64 * 4096].view(64, 4096)
    shifted = flat[1 : 1 + 64 * 4096].view(64, 4096)  # the same shape and strides, 2-byte aligned
    assert (aligned.shape, aligned.stride()) == (shifted.shape, shifted.stride())
    out_flat = torch.full((64 * 4096 + 8,), float("nan"), device="cuda", dtype=torch.bfloat16)
    out_aligned, out_shifted = out_flat[: 64 * 4096].view(64, 4096), out_flat[3 : 3 + 64 * 4096].view(64, 4096)
    w_flat = torch.empty(4097, device="cuda", dtype=torch.bfloat16)
    w_shifted = w_flat[1:]
    w_shifted.copy_(w)
    calls = {
        "aligned": lambda: rms_norm(aligned, w),
        "x shifted": lambda: rms_norm(shifted, w),
        "out aligned": lambda: rms_norm(aligned, w, out=out_aligned).clone(),
        "out shifted": lambda: rms_norm(aligned, w, out=out_shifted).clone(),
        "weight shifted": lambda: rms_norm(aligned, w_shifted),
    }
    for name, call in calls.items():
        rmsnorm_op._LAYOUTS.clear()
        checked = call()  # every rule checked; the layout is remembered
        assert len(rmsnorm_op._LAYOUTS) == 1, name
        rms_norm(aligned, w, out=out_aligned)  # the same layout at aligned addresses
        out_shifted.fill_(float("nan"))
        seen = call()  # the hot path
        assert torch.equal(seen, checked), name
        _assert_close(seen, shifted if name == "x shifted" else aligned, w, 1e-6, "bf16")
    for eps in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="eps"):
            rms_norm(aligned, w, eps)
    with pytest.raises(ValueError, match="weight is on cpu"):
        rms_norm(aligned, w.cpu())
    with pytest.raises(TypeError, match="weight must be"):
        rms_norm(aligned, w.half())
    with pytest.raises(ValueError, match="out must match"):
        rms_norm(aligned, w, out=torch.empty(64, 4096, device="cuda", dtype=torch.float16))


def test_unloading_every_variant_but_the_kept_ones_leaves_the_op_working() -> None:
    # What the tuner's measuring process does before each timing.
    x, w = _inputs(8, 4096, "bf16", "bf16", 5)
    served = rms_norm(x, w)
    backend = get_backend()
    key = {"M": 8, "N": 4096, "dtype": "bf16", "weight_dtype": "bf16"}
    configs = list(SPEC.space(key, DeviceQuery.of(backend.device().identity)))[:3]
    kernels = [kernel_for(backend, c, key) for c in configs]
    assert unload_kernels([kernels[0]]) >= 3  # the two others and what the op had loaded
    assert kernel_for(backend, configs[0], key) is kernels[0]
    assert kernel_for(backend, configs[1], key) is not kernels[1]  # loaded again
    torch.testing.assert_close(rms_norm(x, w), served, rtol=0, atol=0)
    assert unload_kernels() >= 2


def test_under_torch_compile_and_graph_capture() -> None:
    x, w = _inputs(256, 4096, "bf16", "bf16", 3)
    compiled = torch.compile(lambda a, b: rms_norm(a, b, 1e-5) * 2.0, fullgraph=True)
    _assert_close(compiled(x, w) / 2.0, x, w, 1e-5, "bf16")

    static_x = x.clone()
    rms_norm(static_x, w)  # compile and load the variant before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = rms_norm(static_x, w)
    fresh, _ = _inputs(256, 4096, "bf16", "bf16", 4)
    static_x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    _assert_close(static_y, fresh, w, 1e-6, "bf16")


# torch's CUDA-graph tree manager captures an empty graph of its own when it starts.
@pytest.mark.filterwarnings("default:The CUDA Graph is empty:UserWarning")
def test_no_graph_break_under_torch_compile_also_with_reduce_overhead() -> None:
    import torch._dynamo

    def layer(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return rms_norm(a * 2, b, 1e-6) + 1

    def layer_out(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(a)
        rms_norm(a, b, 1e-6, out=out)
        return out * 3

    x, w = _inputs(16, 3584, "bf16", "bf16", 6)
    for fn in (layer, layer_out):
        torch._dynamo.reset()
        explained = torch._dynamo.explain(fn)(x, w)
        assert explained.graph_break_count == 0, explained.break_reasons
        for mode in (None, "reduce-overhead"):
            compiled = torch.compile(fn, fullgraph=True, mode=mode)
            for _ in range(3):
                torch.testing.assert_close(compiled(x, w), fn(x, w))


def test_bad_inputs_are_rejected_before_launch() -> None:
    x = torch.randn(4, 64, device="cuda")
    w = torch.rand(64, device="cuda")
    with pytest.raises(ValueError, match="weight is on cpu"):
        rms_norm(x, w.cpu())
    with pytest.raises(ValueError, match="contiguous"):
        rms_norm(x.t().contiguous().t(), torch.rand(4, device="cuda"))
    with pytest.raises(TypeError, match="int32"):
        rms_norm(x.to(torch.int32), w)


def test_an_accepted_config_that_fails_at_launch_is_not_masked(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An artifact whose winner cannot launch on this device (a block of 2048 threads)
    makes the call raise, instead of silently running another config."""
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1]))
    from factories import make_artifact
    from flyconfigs.errors import LaunchError
    from flyconfigs.registry import refresh
    from flyconfigs.schema import write_atomic

    device = get_backend().device()
    key = {"M": 8, "N": 4096, "dtype": "fp32", "weight_dtype": "fp32"}
    data = make_artifact(device=device.model_dump(mode="json"), key=key).model_dump(mode="json")
    bad = {"threads": 1024, "rows_per_block": 2, "vector_bytes": 16, "row_storage": "reg", "occupancy": 0}
    data["candidates"][0]["config"] = bad
    data["winner"]["config"] = bad
    from flyconfigs.schema import Artifact

    artifact = Artifact.model_validate(data)
    write_atomic(tmp_path / artifact.file_name(), artifact.to_json_bytes())
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path))
    refresh()
    x = torch.randn(8, 4096, device="cuda")
    w = torch.rand(4096, device="cuda")
    # The kernel's check refuses a 2048-thread block: the default is served, and is right.
    _assert_close(rms_norm(x, w), x, w, 1e-6, "fp32")
    from flyconfigs.registry import default_resolver

    assert any(p.kind == "invalid-config" for p in default_resolver().problems.problems())
    # Were the check to accept it (as an incomplete check of some kernel might), the real
    # failure raises instead of being masked by another config: the source asserts the
    # same block-size rule, so NVRTC refuses it before the device would.
    from flyconfigs.errors import CompileError
    from flyconfigs.kernels.rmsnorm import RMSNormSpec

    monkeypatch.setattr(RMSNormSpec, "check_config", lambda self, config, key, device: None)
    refresh()
    with pytest.raises((CompileError, LaunchError)):
        rms_norm(x, w)


def test_artifacts_of_the_test_backend_never_reach_this_device(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1]))
    from factories import artifact_dict
    from flyconfigs.registry import default_resolver, refresh, resolve
    from flyconfigs.schema import Artifact, write_atomic

    device = get_backend().device()
    key = {"M": 8, "N": 4096, "dtype": "fp32", "weight_dtype": "fp32"}
    data = artifact_dict(device=device.model_dump(mode="json"), key=key)
    data["provenance"]["backend"] = "simulated"
    artifact = Artifact.model_validate(data)
    write_atomic(tmp_path / artifact.file_name(), artifact.to_json_bytes())
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path))
    refresh()
    served = resolve("rmsnorm", key)
    # Refused, the test double is passed over: an installed package serves, or the default.
    assert served.source != "override" and served.file != str(tmp_path / artifact.file_name())
    assert any(p.kind == "test-double" for p in default_resolver().problems.problems())
    x = torch.randn(8, 4096, device="cuda")
    w = torch.rand(4096, device="cuda")
    _assert_close(rms_norm(x, w), x, w, 1e-6, "fp32")
