"""Interop with the real ``flydsl`` package (0.5.0, whose offline format is 0.4.2's; it
imports on a CPU): its own autotuner writes offline configs for every kind of key and config FlyDSL users write,
``flyconfigs flydsl import`` takes all of them, ``flydsl export`` writes them back byte
for byte, and FlyDSL's own loader serves what flyconfigs exported.

Only FlyDSL's device query is replaced (no AMD GPU exists here): it reports an MI300X.
The kernels are plain Python callables, which FlyDSL's autotuner accepts like its JIT
functions; its timing function is given (the candidates are not GPU kernels)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from flyconfigs.cli import main
from flyconfigs.schema import load_artifact

flydsl_autotune = pytest.importorskip("flydsl.autotune")
autotune = importlib.import_module("flydsl.autotune")  # the package's name `autotune` is the decorator

MI300X = {"name": "AMD Instinct MI300X", "arch": "gfx942", "compute_units": 304}


class Tensor:
    """What FlyDSL reads off a tensor argument: its shape and dtype."""

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.shape = shape
        self.dtype = dtype


@pytest.fixture
def flydsl_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "flydsl-configs"
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CONFIG_DIR", str(folder))
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CACHE_DIR", str(tmp_path / "flydsl-cache"))
    monkeypatch.setattr(autotune, "_device_descriptor", lambda device=None: dict(MI300X))
    return folder


def _timed(config_ms: dict[str, float]) -> Any:
    """FlyDSL's do_bench contract: run the call, return milliseconds (from the config)."""
    seen: dict[str, Any] = {}

    def kernel(**kwargs: Any) -> None:
        seen.update(kwargs)

    def bench(call: Any, warmup: int, rep: int) -> float:
        seen.clear()
        call()
        return config_ms.get(str(seen.get("BLOCK")), 5.0)

    return kernel, bench


def _tuners(bench: Any, kernel: Any) -> list[tuple[Any, list[tuple[tuple[Any, ...], dict[str, Any]]]]]:
    """FlyDSL tuners whose keys and configs cover what the schema must hold."""
    many = {f"p{i:02d}": i for i in range(40)}  # more than 32 config entries

    def attention(q: Any, k: Any, causal: bool, scale: float, window: Any, layout: str, BLOCK: int = 0,
                  **extra: Any) -> None:
        kernel(BLOCK=BLOCK, **extra)

    def gemm(a: Any, b: Any, m: int, split: Any, BLOCK: int = 0, **extra: Any) -> None:
        kernel(BLOCK=BLOCK, **extra)

    configs_a = [
        autotune.Config(BLOCK=64, num_warps=4, waves_per_eu=2, use_tma=True, alpha=0.5, order="row", pad=None,
                        tiles=[1, 2, 4], meta={"stages": 2, "swizzle": "xor"}),
        autotune.Config(BLOCK=128, num_warps=8, use_tma=False, alpha=1.25, order="col", pad=None,
                        tiles=[2, 2], meta={"stages": 3, "swizzle": None}),
    ]
    configs_b = [autotune.Config(BLOCK=256, **many), autotune.Config(BLOCK=32, **many)]
    tuned_a = autotune.Autotuner(attention, configs_a, ["q", "k", "causal", "scale", "window", "layout"], 1, 1,
                                 do_bench_fn=bench, artifact_name="_PagedAttention.v2")
    tuned_b = autotune.Autotuner(gemm, configs_b, ["a", "b", "m", "split"], 1, 1, do_bench_fn=bench,
                                 artifact_name="GEMM-a8w8")
    q = Tensor((4, 32, 128), "torch.bfloat16")
    calls_a = [
        ((q, Tensor((4, 32, 128), "torch.bfloat16"), True, 0.125, None, "bshd"), {}),
        ((q, Tensor((4, 8, 128), "torch.bfloat16"), False, 0.0883883476, 4096, "bhsd"), {}),
    ]
    calls_b = [((Tensor((1, 4096), "torch.float8_e4m3fnuz"), Tensor((4096, 4096), "torch.float8_e4m3fnuz"), 1, None), {}),
               ((Tensor((64, 4096), "torch.float8_e4m3fnuz"), Tensor((4096, 4096), "torch.float8_e4m3fnuz"), 64,
                 [2, 1]), {})]
    return [(tuned_a, calls_a), (tuned_b, calls_b)]


def test_flydsls_writer_files_import_round_trip_and_are_served_back_by_flydsls_loader(
        flydsl_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kernel, bench = _timed({"128": 1.0, "32": 0.5})
    monkeypatch.setenv("FLYDSL_AUTOTUNE", "1")
    tuned: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    for tuner, calls in _tuners(bench, kernel):
        for args, kwargs in calls:
            best = tuner.resolve_config(*args, **kwargs)
            tuned.append((tuner, args, best.to_dict()))
    written = sorted(flydsl_env.glob("*.json"))
    assert len(written) == 4, "FlyDSL's writer emits one file per tuned call"
    kinds = json.dumps([json.loads(p.read_text()) for p in written])
    for needle in ("true", "false", "null", "0.125", "[4, 32, 128]", "_PagedAttention.v2", "p39"):
        assert needle in kinds, f"the corpus must exercise {needle}"

    capsys.readouterr()
    assert main(["flydsl", "import", str(flydsl_env), "--out", str(tmp_path / "imported"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["files"]) == 4 and report["failed"] == []
    imported = sorted((tmp_path / "imported").glob("*.json"))
    assert len(imported) == 4
    for path in imported:
        artifact = load_artifact(path)
        assert artifact.selection.rule == "imported" and artifact.device.arch == "gfx942"
    assert main(["validate", str(tmp_path / "imported")]) == 0

    assert main(["flydsl", "export", *map(str, imported), "--out", str(tmp_path / "exported")]) == 0
    exported = sorted((tmp_path / "exported").glob("*.json"))
    assert [p.name for p in exported] == [p.name for p in written]
    for ours, theirs in zip(exported, written, strict=True):
        assert ours.read_bytes() == theirs.read_bytes(), ours.name

    # FlyDSL's loader, reading only what flyconfigs exported, serves every tuned config
    # without tuning again.
    monkeypatch.delenv("FLYDSL_AUTOTUNE")
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CONFIG_DIR", str(tmp_path / "exported"))
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CACHE_DIR", str(tmp_path / "fresh-cache"))

    def no_bench(call: Any, warmup: int, rep: int) -> float:
        raise AssertionError("FlyDSL tuned again instead of loading the exported config")

    fresh = _tuners(no_bench, kernel)
    served = []
    for tuner, calls in fresh:
        for args, kwargs in calls:
            served.append(tuner.resolve_config(*args, **kwargs).to_dict())
    assert served == [best for _, _, best in tuned]
