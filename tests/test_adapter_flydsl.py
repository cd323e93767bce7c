"""FlyDSL's ``Autotuner`` (the real ``flydsl`` wheel, on the CPU as FlyDSL's own unit tests
run it) served from an installed flyconfigs data package by FlyDSL's own identity, and
falling through to FlyDSL's own order when the package has nothing for a call.

The configs are what FlyDSL's own tuner wrote offline, imported with ``flyconfigs import
flydsl`` and installed as a real distribution (files and ``.dist-info``) on ``sys.path``.
As in test_flydsl_real.py, only FlyDSL's device query is replaced (no AMD GPU here: it
reports an MI300X, and so does ``FLYCONFIGS_DEVICE``), the kernels are plain callables and
the timing function is given."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

import pytest

from flyconfigs.adapters.flydsl import FlyDSLKernel, flydsl_key, serve
from flyconfigs.cli import main
from flyconfigs.errors import ConfigurationError
from flyconfigs.schema import load_artifact

pytest.importorskip("flydsl.autotune")
autotune = importlib.import_module("flydsl.autotune")

MI300X = {"name": "AMD Instinct MI300X", "arch": "gfx942", "compute_units": 304}
MI300X_SPEC = "gfx942:304:AMD Instinct MI300X:sramecc+,xnack-"


class Tensor:
    """What FlyDSL reads off a tensor argument: its shape and dtype."""

    def __init__(self, shape: tuple[int, ...], dtype: str = "torch.bfloat16") -> None:
        self.shape = shape
        self.dtype = dtype


RAN: list[int] = []
"""The ``BLOCK`` of every launch of :func:`gemm`, in order."""


def gemm(a: Any, m: int, scale: float, BLOCK: int = 0, stages: int = 1, num_warps: int = 4) -> tuple[int, int]:
    """A kernel FlyDSL tunes: ``BLOCK``, ``stages`` and ``num_warps`` are its tunables,
    ``a`` and ``m`` its key."""
    RAN.append(BLOCK)
    return BLOCK, stages


CONFIGS = [autotune.Config(BLOCK=64, stages=2, num_warps=4), autotune.Config(BLOCK=128, stages=3, num_warps=8)]
TUNED = [(Tensor((1, 4096)), 1), (Tensor((64, 4096)), 64)]


def _tuner(bench: Any, **options: Any) -> Any:
    return autotune.Autotuner(gemm, CONFIGS, ["a", "m"], 1, 1, do_bench_fn=bench, artifact_name="acme_gemm", **options)


def _bench(times: dict[int, float], searched: list[int]) -> Any:
    """FlyDSL's do_bench contract: run the call, return milliseconds (here, by ``BLOCK``);
    each timed ``BLOCK`` is appended to ``searched``."""
    def bench(call: Any, warmup: int, rep: int) -> float:
        call()
        searched.append(RAN[-1])
        return times[RAN[-1]]
    return bench


@pytest.fixture
def flydsl_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CACHE_DIR", str(tmp_path / "flydsl-cache"))
    monkeypatch.delenv("FLYDSL_AUTOTUNE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("FLYDSL_AUTOTUNE", raising=False)
    monkeypatch.setattr(autotune, "_device_descriptor", lambda device=None: dict(MI300X))
    return tmp_path


@pytest.fixture
def installed(flydsl_env: Path, site: Any, monkeypatch: pytest.MonkeyPatch) -> dict[int, dict[str, Any]]:
    """FlyDSL's tuner writes its offline configs (the fast config differs per key); they
    are imported and installed as ``flyconfigs-gfx942``.  Returns the winner by ``m``."""
    offline = flydsl_env / "offline"
    monkeypatch.setenv("FLYDSL_AUTOTUNE", "1")
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CONFIG_DIR", str(offline))
    winners = {}
    for (a, m), fast in zip(TUNED, (64, 128), strict=True):
        tuner = _tuner(_bench({64: 2.0, 128: 1.0} if fast == 128 else {64: 1.0, 128: 2.0}, []))
        winners[m] = tuner.resolve_config(a, m, 0.5).to_dict()
    monkeypatch.delenv("FLYDSL_AUTOTUNE")
    monkeypatch.delenv("FLYDSL_AUTOTUNE_CONFIG_DIR")
    assert len(list(offline.iterdir())) == 2 and winners[1] != winners[64]
    assert main(["import", "flydsl", str(offline), "--out", str(flydsl_env / "imported")]) == 0
    site.install("gfx942", [load_artifact(p) for p in sorted((flydsl_env / "imported").iterdir())])
    monkeypatch.setenv("FLYCONFIGS_DEVICE", MI300X_SPEC)
    return winners


def test_a_tuned_call_is_served_from_the_installed_package_without_a_search(installed: dict[int, dict[str, Any]]) -> None:
    searched: list[int] = []
    tuner = serve(_tuner(_bench({64: 1.0, 128: 1.0}, searched)))
    for a, m in TUNED:
        config = tuner.resolve_config(a, m, 0.5)
        assert isinstance(config, autotune.Config) and config.to_dict() == installed[m]
        assert tuner.default.last.source == "package" and tuner.default.last.origin == "flyconfigs-gfx942"
        assert tuner.default.last.layer == "same-compute-units"  # FlyDSL's identity has no device features
        assert tuner(a, m, 0.5) == (installed[m]["BLOCK"], installed[m]["stages"])
    assert searched == []


def test_an_untuned_call_falls_through_to_flydsls_search_once(installed: dict[int, dict[str, Any]]) -> None:
    searched: list[int] = []
    tuner = serve(_tuner(_bench({64: 3.0, 128: 1.0}, searched)))
    untuned = (Tensor((4096, 4096)), 4096)
    assert tuner.resolve_config(*untuned, 0.5).to_dict() == CONFIGS[1].to_dict()
    assert searched == [64, 128] and tuner.default.last.source == "default"
    assert tuner.resolve_config(*untuned, 0.5).to_dict() == CONFIGS[1].to_dict()  # FlyDSL's cache now
    assert searched == [64, 128]


def test_an_untuned_call_takes_the_tuners_own_default_when_it_has_one(installed: dict[int, dict[str, Any]]) -> None:
    searched: list[int] = []
    heuristic = autotune.Config(BLOCK=32, stages=1)
    tuner = serve(_tuner(_bench({64: 1.0, 128: 1.0}, searched), default=lambda *args, **kwargs: heuristic))
    assert tuner.resolve_config(Tensor((4096, 4096)), 4096, 0.5) is heuristic
    assert tuner.resolve_config(*TUNED[0], 0.5).to_dict() == installed[1]
    assert searched == []


def test_flydsls_own_offline_folder_still_comes_first(installed: dict[int, dict[str, Any]], flydsl_env: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYDSL_AUTOTUNE", "1")
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CONFIG_DIR", str(flydsl_env / "own"))
    _tuner(_bench({64: 2.0, 128: 1.0}, [])).resolve_config(*TUNED[0], 0.5)  # writes BLOCK=128 for m=1
    monkeypatch.delenv("FLYDSL_AUTOTUNE")
    assert installed[1]["BLOCK"] == 64
    tuner = serve(_tuner(_bench({64: 1.0, 128: 1.0}, [])))
    assert tuner.resolve_config(*TUNED[0], 0.5).to_dict()["BLOCK"] == 128
    assert tuner.default.last is None  # the hook was never asked


def test_a_registry_config_the_call_cannot_take_falls_through_with_a_warning(
        installed: dict[int, dict[str, Any]], caplog: pytest.LogCaptureFixture) -> None:
    heuristic = autotune.Config(BLOCK=32, stages=1)
    tuner = serve(_tuner(_bench({}, []), default=lambda *args, **kwargs: heuristic))
    with caplog.at_level(logging.WARNING, logger="flyconfigs.adapters.flydsl"):
        assert tuner.resolve_config(*TUNED[0], 0.5, stages=2) is heuristic  # the call sets a tunable itself
    assert "would override the call's stages" in caplog.text


def test_the_key_is_flydsls_identity_and_the_declaration_checks_what_flydsl_checks() -> None:
    import inspect

    signature = inspect.signature(gemm)
    assert flydsl_key(signature, ("a", "m"), (Tensor((2, 8)), 2, 0.5), {}) == {"a": [2, 8], "m": 2}
    decl = FlyDSLKernel.of_signature("acme_gemm", ("a", "m"), signature)
    assert decl.name == "flydsl.acme_gemm" and decl.device_match == "product"
    assert decl.check_config({"BLOCK": 64, "stages": 2, "num_warps": 4, "waves_per_eu": 2}, {}, None) is None
    assert decl.check_config({"m": 4}, {}, None) == "m is a key parameter; a config cannot set it"
    assert decl.check_config({"BLOCKS": 4}, {}, None).startswith("BLOCKS is not a parameter of the kernel")
    assert decl.check_config({"waves_per_eu": True}, {}, None) == (
        "waves_per_eu=True is not an int (a FlyDSL compiler option)")
    # FlyDSL checks a value against a parameter's annotation when it is a type (not a string).
    typed = inspect.Signature([inspect.Parameter("BLOCK", inspect.Parameter.KEYWORD_ONLY, annotation=int)])
    assert FlyDSLKernel.of_signature("k", (), typed).check_config({"BLOCK": 64.0}, {}, None) == (
        "BLOCK=64.0 is not int, as the kernel's annotation says")
    # fx.Constexpr[int], as FlyDSL's own __coerce__ checks it: "512", 512.0 and True are refused.
    fx = pytest.importorskip("flydsl.expr")
    constexpr = inspect.Signature([inspect.Parameter("BLOCK", inspect.Parameter.KEYWORD_ONLY,
                                                     annotation=fx.Constexpr[int])])
    kernel = FlyDSLKernel.of_signature("k", (), constexpr)
    assert kernel.check_config({"BLOCK": 512}, {}, None) is None
    for bad in ("512", 512.0, True):
        assert "does not match its annotation" in kernel.check_config({"BLOCK": bad}, {}, None)
    assert FlyDSLKernel.of_signature("k", (), constexpr, borrow=True).device_match == "arch"
    with pytest.raises(ConfigurationError, match="artifact_name"):
        serve(autotune.Autotuner(gemm, CONFIGS, ["a", "m"], 1, 1))


def test_a_search_in_one_thread_never_makes_another_threads_served_call_skip_the_package(
        installed: dict[int, dict[str, Any]]) -> None:
    import threading

    searching, served = threading.Event(), threading.Event()
    searched_by: list[str] = []

    def bench(call: Any, warmup: int, rep: int) -> float:
        searched_by.append(threading.current_thread().name)
        if threading.current_thread().name == "searcher" and not searching.is_set():
            searching.set()
            assert served.wait(10), "the served call never finished"
        call()
        return {64: 2.0, 128: 1.0}[RAN[-1]]

    tuner = serve(_tuner(bench))  # no FlyDSL default: an untuned key is searched
    untuned = (Tensor((4096, 4096)), 4096)
    searcher = threading.Thread(target=tuner.resolve_config, args=(*untuned, 0.5), name="searcher")
    searcher.start()
    try:
        assert searching.wait(10)
        config = tuner.resolve_config(*TUNED[0], 0.5)  # while the other thread searches
    finally:
        served.set()
        searcher.join(10)
    assert config.to_dict() == installed[1]
    assert set(searched_by) == {"searcher"}
    assert tuner.resolve_config(*untuned, 0.5).to_dict() == CONFIGS[1].to_dict()  # FlyDSL cached the search
    assert tuner.resolve_config(*TUNED[0], 0.5).to_dict() == installed[1]
    assert tuner.default.fallback is None and isinstance(tuner.default, type(serve(_tuner(bench)).default))


def test_a_warm_served_call_does_not_go_through_the_registry(installed: dict[int, dict[str, Any]],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from flyconfigs.registry import Resolver

    resolver = Resolver()
    asked: list[object] = []
    real = resolver.resolve
    monkeypatch.setattr(resolver, "resolve", lambda *a, **k: asked.append(a) or real(*a, **k))
    tuner = serve(_tuner(_bench({}, [])), resolver=resolver)
    first = tuner.resolve_config(*TUNED[1], 0.5)
    assert first.to_dict() == installed[64]
    for _ in range(5):
        assert tuner.resolve_config(*TUNED[1], 0.5) is first
    assert len(asked) == 1
    assert tuner.resolve_config(TUNED[1][0], m=64, scale=0.5).to_dict() == installed[64]  # passed otherwise: asked
    assert len(asked) == 2


def test_the_device_is_flydsls_own_identity_when_flyconfigs_knows_none(installed: dict[int, dict[str, Any]],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from flyconfigs.registry import default_resolver

    monkeypatch.delenv("FLYCONFIGS_DEVICE")
    default_resolver().refresh()
    assert default_resolver().current_device()[0] is None
    tuner = serve(_tuner(_bench({}, [])))
    assert tuner.resolve_config(*TUNED[0], 0.5).to_dict() == installed[1]
    assert tuner.default.last.device.product == "AMD Instinct MI300X"


def test_a_config_of_another_product_of_the_arch_is_served_only_when_borrowing_is_asked(
        installed: dict[int, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    from flyconfigs.registry import default_resolver

    monkeypatch.setenv("FLYCONFIGS_DEVICE", "gfx942:304:AMD Instinct MI325X")  # the MI300X's arch and CU count
    default_resolver().refresh()
    searched: list[int] = []
    tuner = serve(_tuner(_bench({64: 1.0, 128: 2.0}, searched)))
    assert tuner.resolve_config(*TUNED[1], 0.5).to_dict() == CONFIGS[0].to_dict() and searched == [64, 128]
    borrowing = serve(_tuner(_bench({}, [])), borrow=True)
    assert borrowing.resolve_config(*TUNED[0], 0.5).to_dict() == installed[1]
    assert borrowing.default.last.matched_device.product == "AMD Instinct MI300X"


def test_explain_serves_a_flydsl_kernel_no_package_declares(installed: dict[int, dict[str, Any]],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["explain", "flydsl.acme_gemm", "a=[1,4096]", "m=1", "--device", MI300X_SPEC]) == 0
    out = capsys.readouterr().out
    assert "flyconfigs-gfx942" in out and f"BLOCK={installed[1]['BLOCK']}" in out
    assert main(["explain", "flydsl.acme_gemm", "a=[1,4096]", "m=1", "--device", "gfx942:80:AMD Instinct MI308X"]) == 0
    assert "exact device only" in capsys.readouterr().out
