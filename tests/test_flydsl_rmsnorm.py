"""FlyDSL's own RMSNorm (its adopter as PR #786 writes it, tests/flydsl_adopter.py) tuned
by FlyDSL's real ``Autotuner`` (0.5.0, on the CPU as FlyDSL's own unit tests run it),
imported, installed as ``flyconfigs-gfx942`` beside flyconfigs' own ``rmsnorm`` and served
to an MI300X, with FlyDSL's own order kept when nothing is installed.

Replaced, since no AMD GPU exists here: FlyDSL's device descriptor (it reports the
device each test names), its timing function (given, as FlyDSL's ``do_bench`` contract
allows) and the kernel launch (``stub_launch``: recorded, not compiled).  flyconfigs
detects no GPU and ``FLYCONFIGS_DEVICE`` is unset, so the device served is FlyDSL's own
identity of the call."""

from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flydsl.autotune")

from factories import MI300X as MI300X_DEVICE  # noqa: E402
from factories import make_artifact  # noqa: E402
from flyconfigs import resolve  # noqa: E402
from flyconfigs.adapters.flydsl import serve  # noqa: E402
from flyconfigs.cli import main  # noqa: E402
from flyconfigs.schema import load_artifact, write_atomic  # noqa: E402
from flyconfigs.schema.flydsl import flydsl_file_name  # noqa: E402
from flydsl_adopter import SEARCH_CONFIGS, call, rmsnorm_tuner, stub_launch  # noqa: E402

autotune = importlib.import_module("flydsl.autotune")

MI300X = {"name": "AMD Instinct MI300X", "arch": "gfx942", "compute_units": 304}
MI325X = {"name": "AMD Instinct MI325X", "arch": "gfx942", "compute_units": 304}
MI300A = {"name": "AMD Instinct MI300A", "arch": "gfx942", "compute_units": 228}
MI308X = {"name": "AMD Instinct MI308X", "arch": "gfx942", "compute_units": 80}
BIG, SMALL = (8192, 8192), (4, 4096)
"""Two tuned shapes (``m_in``, ``N``); FlyDSL's search picks a different winner for each."""
WINNERS = {BIG: {"BLOCK_THREADS": 512, "waves_per_eu": 2}, SMALL: {"BLOCK_THREADS": 128, "waves_per_eu": 1}}


def on_device(monkeypatch: pytest.MonkeyPatch, device: dict[str, Any]) -> None:
    monkeypatch.setattr(autotune, "_device_descriptor", lambda where=None: dict(device))


def flydsl_file(folder: Path, key: dict[str, Any], config: dict[str, Any], device: dict[str, Any] = MI300X) -> Path:
    """A file as FlyDSL's writer lays it out (for configs FlyDSL's writer itself refuses)."""
    identity = {"name": "rmsnorm", "key": key, "device": device}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / flydsl_file_name(identity)
    path.write_text(json.dumps({"version": 1, "identity": identity, "config": config}, sort_keys=True, indent=2) + "\n")
    return path


@pytest.fixture
def flydsl_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CACHE_DIR", str(tmp_path / "flydsl-cache"))
    monkeypatch.delenv("FLYDSL_AUTOTUNE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("FLYDSL_AUTOTUNE", raising=False)
    on_device(monkeypatch, MI300X)
    return tmp_path


def tune_offline(folder: Path, monkeypatch: pytest.MonkeyPatch, device: dict[str, Any] = MI300X) -> None:
    """FlyDSL's own forced search (``FLYDSL_AUTOTUNE=1``) writes one offline file per
    shape into ``folder``, on ``device``: the winner is :data:`WINNERS`'s."""
    with monkeypatch.context() as scoped:
        on_device(scoped, device)
        scoped.setenv("FLYDSL_AUTOTUNE", "1")
        scoped.setenv("FLYDSL_AUTOTUNE_CONFIG_DIR", str(folder))
        for shape, winner in WINNERS.items():
            ran: list[tuple[Any, Any]] = []  # (BLOCK_THREADS, waves_per_eu) of each launch

            def bench(run: Any, warmup: int, rep: int, winner: dict[str, Any] = winner,
                      ran: list[tuple[Any, Any]] = ran) -> float:
                run()
                return 1.0 if ran[-1] == (winner["BLOCK_THREADS"], winner["waves_per_eu"]) else 2.0
            tuner = rmsnorm_tuner(do_bench=bench)
            stub_launch(tuner)
            tuner._run_with_hints = _recording(tuner, ran)
            args, kwargs = call(*shape)
            assert tuner.resolve_config(*args, **kwargs).to_dict() == winner


def _recording(tuner: Any, ran: list[tuple[Any, Any]]) -> Any:
    """FlyDSL's ``_run_with_hints``, also recording each candidate's ``BLOCK_THREADS`` and
    ``waves_per_eu`` (a compiler option, which never reaches the kernel's arguments)."""
    original = tuner._run_with_hints

    def run(compiler_opts: dict[str, Any], args: Any, kwargs: Any) -> Any:
        ran.append((kwargs["BLOCK_THREADS"], compiler_opts.get("waves_per_eu")))
        return original(compiler_opts, args, kwargs)
    return run


@pytest.fixture
def installed(flydsl_env: Path, site: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    """FlyDSL's RMSNorm tuned on an MI300X, imported and installed as ``flyconfigs-gfx942``
    beside a tuning of flyconfigs' own ``rmsnorm``; returns the imported folder."""
    tune_offline(flydsl_env / "offline", monkeypatch)
    assert len(list((flydsl_env / "offline").iterdir())) == 2
    assert main(["import", "flydsl", str(flydsl_env / "offline"), "--out", str(flydsl_env / "imported")]) == 0
    ours = make_artifact(device=MI300X_DEVICE)
    site.install("gfx942", [ours, *(load_artifact(p) for p in sorted((flydsl_env / "imported").iterdir()))])
    return flydsl_env / "imported"


def test_flydsls_rmsnorm_is_served_from_the_installed_package_beside_flyconfigs_own(installed: Path) -> None:
    tuner = serve(rmsnorm_tuner(do_bench=lambda *a, **k: pytest.fail("searched")))
    launches = stub_launch(tuner)
    for shape, winner in WINNERS.items():
        args, kwargs = call(*shape)
        served = tuner.resolve_config(*args, **kwargs).to_dict()
        last = tuner.default.last
        assert served == winner, last
        assert (last.kernel, last.source, last.origin) == ("flydsl.rmsnorm", "package", "flyconfigs-gfx942")
        assert dict(last.key) == {"m_in": shape[0], "N": shape[1], "dtype_str": "bf16"}
        tuner(*args, **kwargs)
        assert launches[-1]["BLOCK_THREADS"] == winner["BLOCK_THREADS"]
    # flyconfigs' own rmsnorm, in the same package, is served as before.
    own = resolve("rmsnorm", {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"},
                  "gfx942:304:AMD Instinct MI300X:sramecc+,xnack-")
    assert own.source == "package" and own.kernel == "rmsnorm"


def test_flydsls_own_order_holds_when_nothing_is_installed(flydsl_env: Path, site: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    tuner = serve(rmsnorm_tuner(do_bench=lambda *a, **k: pytest.fail("searched")))
    args, kwargs = call(*BIG)
    assert tuner.resolve_config(*args, **kwargs).to_dict() == {"BLOCK_THREADS": 256}  # the adopter's default
    assert tuner.default.last.source == "default"
    # FlyDSL's offline folder still comes before the hook.
    tune_offline(flydsl_env / "own", monkeypatch)
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CONFIG_DIR", str(flydsl_env / "own"))
    fresh = serve(rmsnorm_tuner())
    assert fresh.resolve_config(*args, **kwargs).to_dict() == WINNERS[BIG]
    assert fresh.default.last is None


def test_imported_files_are_in_flydsls_namespace_and_name_their_source(installed: Path) -> None:
    artifacts = [load_artifact(p) for p in sorted(installed.iterdir())]
    assert {a.kernel.name for a in artifacts} == {"flydsl.rmsnorm"}
    for artifact in artifacts:
        source = artifact.provenance.source
        assert source is not None and source.file.startswith("rmsnorm-") and "identity.device" in source.device_from
        assert artifact.selection.rule == "imported"


def test_a_config_of_the_wrong_type_is_refused_by_import_validate_doctor_and_the_adapter(
        flydsl_env: Path, site: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    key = {"m_in": BIG[0], "N": BIG[1], "dtype_str": "bf16"}
    for i, bad in enumerate(("512", 512.0, True)):
        flydsl_file(flydsl_env / f"bad{i}", key, {"BLOCK_THREADS": bad})
        capsys.readouterr()
        assert main(["import", "flydsl", str(flydsl_env / f"bad{i}"), "--out", str(flydsl_env / "out")]) == 1
        assert "BLOCK_THREADS" in capsys.readouterr().err
    assert not (flydsl_env / "out").exists() or list((flydsl_env / "out").iterdir()) == []
    # A file FlyDSL's format can hold but FlyDSL's loader refuses, read as is.
    bad = flydsl_file(flydsl_env / "raw", key, {"BLOCK_THREADS": 512.0})
    capsys.readouterr()
    assert main(["validate", str(bad)]) == 1
    assert "BLOCK_THREADS=512.0" in capsys.readouterr().out
    artifact = load_artifact(bad)
    write_atomic(flydsl_env / "art" / artifact.file_name(), artifact.to_json_bytes())
    capsys.readouterr()
    assert main(["publish", str(flydsl_env / "art"), "--name", "acme-flydsl-gfx942", "--target", "gfx942",
                 "--version", "1.0.0", "--out", str(flydsl_env / "dist")]) == 1
    assert "BLOCK_THREADS=512.0" in capsys.readouterr().err and not (flydsl_env / "dist").exists()
    site.install("gfx942", [artifact])
    capsys.readouterr()
    assert main(["doctor", "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert any(p["kind"] == "invalid-config" and "BLOCK_THREADS" in p["message"] for p in problems)
    tuner = serve(rmsnorm_tuner(do_bench=lambda *a, **k: pytest.fail("searched")))
    with caplog.at_level(logging.WARNING):
        assert tuner.resolve_config(*call(*BIG)[0], **call(*BIG)[1]).to_dict() == {"BLOCK_THREADS": 256}
    assert "BLOCK_THREADS=512.0" in caplog.text


@pytest.mark.parametrize(("tuned_on", "served_to"), [(MI308X, MI300X), (MI300X, MI325X), (MI300X, MI300A)])
def test_a_config_reaches_only_the_device_flydsl_names_unless_borrowing_is_asked(
        flydsl_env: Path, site: Any, monkeypatch: pytest.MonkeyPatch, tuned_on: dict[str, Any],
        served_to: dict[str, Any]) -> None:
    tune_offline(flydsl_env / "offline", monkeypatch, tuned_on)
    assert main(["import", "flydsl", str(flydsl_env / "offline"), "--out", str(flydsl_env / "imported")]) == 0
    site.install("gfx942", [load_artifact(p) for p in sorted((flydsl_env / "imported").iterdir())])
    on_device(monkeypatch, served_to)
    args, kwargs = call(*BIG)
    exact = serve(rmsnorm_tuner())
    assert exact.resolve_config(*args, **kwargs).to_dict() == {"BLOCK_THREADS": 256}
    assert exact.default.last.source == "default"
    borrowing = serve(rmsnorm_tuner(), borrow=True)
    assert borrowing.resolve_config(*args, **kwargs).to_dict() == WINNERS[BIG]
    assert borrowing.default.last.matched_device.product == tuned_on["name"]  # another product's, borrowed
    on_device(monkeypatch, tuned_on)
    assert serve(rmsnorm_tuner()).resolve_config(*args, **kwargs).to_dict() == WINNERS[BIG]


def test_the_cli_explains_validates_and_checks_flydsls_rmsnorm(installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["explain", "flydsl.rmsnorm", "m_in=8192", "N=8192", "dtype_str=bf16",
                 "--device", "gfx942:304:AMD Instinct MI300X"]) == 0
    out = capsys.readouterr().out
    assert "BLOCK_THREADS=512 waves_per_eu=2" in out and "flyconfigs-gfx942" in out
    assert main(["explain", "flydsl.rmsnorm", "m_in=8192", "N=8192", "dtype_str=bf16",
                 "--device", "gfx942:304:AMD Instinct MI325X"]) == 0
    out = capsys.readouterr().out
    assert "1 of other products passed over" in out and "BLOCK_THREADS=256  [default" in out
    assert main(["validate", str(installed)]) == 0
    assert main(["doctor"]) == 0
    assert "kernel-name-clash" not in capsys.readouterr().out


def test_a_warm_served_call_does_not_go_through_the_registry(installed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flyconfigs.registry import Resolver

    resolver = Resolver()
    asked: list[str] = []
    real = resolver.resolve
    monkeypatch.setattr(resolver, "resolve", lambda *a, **k: asked.append("resolve") or real(*a, **k))
    tuner = serve(rmsnorm_tuner(), resolver=resolver)
    args, kwargs = call(*BIG)
    first = tuner.resolve_config(*args, **kwargs)
    for _ in range(5):
        assert tuner.resolve_config(*args, **kwargs) is first
    assert asked == ["resolve"]
    resolver.refresh()  # a package installed or removed: asked again
    assert tuner.resolve_config(*args, **kwargs).to_dict() == WINNERS[BIG] and asked == ["resolve", "resolve"]
    assert len(SEARCH_CONFIGS) == 7


def test_the_docs_publish_a_flydsl_tuning_under_its_own_name_and_the_readme_lists_the_extra() -> None:
    root = Path(__file__).parents[1]
    page = (root / "docs" / "adapters.md").read_text(encoding="utf-8")
    section = page[page.index("## FlyDSL"):page.index("## Triton")]
    publishes = [line for line in section.splitlines() if line.startswith("flyconfigs publish")]
    assert publishes and all("--name " in line for line in publishes)
    assert "@serve" in section or "serve(" in section
    assert "`.[flydsl]`" in (root / "README.md").read_text(encoding="utf-8")  # the extra, installed from the checkout


def test_the_hook_serves_the_installed_declaration_itself_unless_borrowing_is_asked(flydsl_env: Path) -> None:
    # The installed object keeps its record: its owning distribution, so the owner's
    # packages' standing; a borrowing copy is a declaration of its own (device_match arch).
    from flyconfigs.kernels.flydsl import RMSNORM
    from flyconfigs.registry.declarations import kernel_record

    exact = serve(rmsnorm_tuner()).default.declaration
    assert exact is RMSNORM and kernel_record(exact).distribution == kernel_record("flydsl.rmsnorm").distribution
    assert kernel_record(exact).distribution is not None
    borrowing = serve(rmsnorm_tuner(), borrow=True).default.declaration
    assert borrowing is not RMSNORM and (borrowing.device_match, RMSNORM.device_match) == ("arch", "product")
