"""A kernel plugin (entry-point group ``flyconfigs.kernels``) whose own code raises never
lets a bare exception out of ``resolve()`` or the command line.

* ``check_key`` raising (anything but :class:`InvalidKeyError`) is the plugin's fault:
  it is reported once, naming the distribution, and the key is checked against the
  declared axes alone, so serving goes on;
* ``name`` raising, or ``default_config`` raising when no artifact serves the call,
  leaves nothing to serve: :class:`KernelPluginError` names the kernel, the
  distribution and the member, and the CLI says so in one line with exit status 1;
* a bad call (an unknown kernel, an invalid key) still raises the documented errors.

The plugin is a real distribution on a temporary ``sys.path``."""

from __future__ import annotations

import json
import logging
import textwrap
from pathlib import Path

import pytest

from conftest import SiteDir
from factories import artifact_dict
from flyconfigs import resolve
from flyconfigs.cli import main
from flyconfigs.errors import InvalidKeyError, KernelPluginError, UnknownKernelError
from flyconfigs.registry import default_resolver, refresh
from flyconfigs.registry.declarations import forget_loaded

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
ARGS = ["M=4096", "N=8192", "dtype=bf16", "weight_dtype=bf16"]
H200_SPEC = "sm90:132:NVIDIA H200"

PLUGIN = '''
from flyconfigs.registry import KernelDecl, KeyAxis, normalize_key

AXES = (KeyAxis("M", int, ordinal=True, minimum=1), KeyAxis("N", int, minimum=1),
        KeyAxis("dtype", str), KeyAxis("weight_dtype", str))


class Brittle(KernelDecl):
    version = 1
    key_axes = AXES

    def __init__(self, name, broken):
        self._name = name
        self.broken = broken

    @property
    def name(self):
        if self.broken == "name":
            raise RuntimeError("name is broken")
        return self._name

    def check_key(self, key):
        if self.broken == "check_key":
            raise ZeroDivisionError(f"check_key is broken at M={key.get('M')}")
        return normalize_key(self, key)

    def check_config(self, config, key, device):
        return None

    def default_config(self, key, device):
        if self.broken == "default_config":
            raise KeyError("default_config is broken")
        return {"threads": 256}


BAD_NAME = Brittle("brittle_name", "name")
BAD_KEY = Brittle("brittle_key", "check_key")
BAD_DEFAULT = Brittle("brittle_default", "default_config")
'''


@pytest.fixture
def plugin(site: SiteDir) -> SiteDir:
    info = site.root / "brittle_kernels-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: brittle-kernels\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [flyconfigs.kernels]
        brittle_name = brittle_kernels:BAD_NAME
        brittle_key = brittle_kernels:BAD_KEY
        brittle_default = brittle_kernels:BAD_DEFAULT
        """))
    (site.root / "brittle_kernels.py").write_text(PLUGIN)
    forget_loaded()
    refresh()
    yield site
    forget_loaded()


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An override directory holding one artifact for each brittle kernel at KEY."""
    folder = tmp_path / "local"
    folder.mkdir()
    for kernel in ("brittle_key", "brittle_default"):
        (folder / f"{kernel}.json").write_text(json.dumps(artifact_dict(key=KEY, kernel=kernel, winner_index=2)))
    monkeypatch.setenv("FLYCONFIGS_PATH", str(folder))
    refresh()
    return folder


def test_a_check_key_that_raises_is_reported_once_and_serving_goes_on(
        plugin: SiteDir, local: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.WARNING, logger="flyconfigs.registry")
    served = resolve("brittle_key", KEY, H200_SPEC)
    assert served.source == "override" and served.config["threads"] == artifact_dict()["candidates"][2]["config"]["threads"]
    assert resolve("brittle_key", {**KEY, "M": 77}, H200_SPEC).key_match == "nearest"
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("kernel-error: entry point 'brittle_kernels:BAD_KEY' of brittle-kernels 1.0 "
                                  "(from brittle-kernels): check_key raised ZeroDivisionError")
    # The declared axes still refuse a bad call with the documented error.
    with pytest.raises(InvalidKeyError, match="missing weight_dtype"):
        resolve("brittle_key", {"M": 1, "N": 1, "dtype": "bf16"}, H200_SPEC)
    assert main(["explain", "brittle_key", *ARGS, "--device", H200_SPEC]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_a_default_config_that_raises_is_one_typed_error_naming_the_distribution(
        plugin: SiteDir, local: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # An artifact serves its key: the default is never needed.
    assert resolve("brittle_default", KEY, H200_SPEC).source == "override"
    with pytest.raises(KernelPluginError) as caught:
        resolve("brittle_default", {**KEY, "M": 77}, "gfx942")
    error = caught.value
    assert (error.kernel, error.member) == ("brittle_default", "default_config")
    assert "brittle-kernels 1.0" in error.origin
    assert "raised KeyError: 'default_config is broken'; no artifact serves this call" in str(error)
    assert main(["explain", "brittle_default", "M=77", "N=8192", "dtype=bf16", "weight_dtype=bf16",
                 "--device", "gfx942"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "brittle-kernels 1.0" in err


def test_a_name_that_raises_is_one_typed_error_naming_the_distribution(plugin: SiteDir,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(KernelPluginError, match=r"kernel 'brittle_name' \(entry point 'brittle_kernels:BAD_NAME' of "
                                                r"brittle-kernels 1.0\): its name raised RuntimeError"):
        resolve("brittle_name", KEY, H200_SPEC)
    import brittle_kernels  # type: ignore[import-not-found]

    with pytest.raises(KernelPluginError, match="passed by the caller.*RuntimeError: name is broken"):
        resolve(brittle_kernels.BAD_NAME, KEY, H200_SPEC)
    assert main(["explain", "brittle_name", *ARGS, "--device", H200_SPEC]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "brittle-kernels 1.0" in err


def test_an_unknown_kernel_is_still_an_unknown_kernel_error(plugin: SiteDir) -> None:
    with pytest.raises(UnknownKernelError, match="declared kernels: .*brittle_default, brittle_key, brittle_name"):
        resolve("brittle_nothing", KEY, H200_SPEC)
    assert default_resolver().problems.problems() == []


def test_doctor_lists_a_plugin_whose_name_raises_and_validate_notes_it(
        plugin: SiteDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "named"
    folder.mkdir()
    artifact = folder / "brittle_name.json"
    artifact.write_text(json.dumps(artifact_dict(key=KEY, kernel="brittle_name")))
    monkeypatch.setenv("FLYCONFIGS_PATH", str(folder))
    monkeypatch.setenv("FLYCONFIGS_DEVICE", H200_SPEC)
    refresh()
    assert main(["doctor"]) == 1
    out, err = capsys.readouterr()
    assert ("problem: kernel-error: entry point 'brittle_kernels:BAD_NAME' of brittle-kernels 1.0 (from brittle-kernels): "
            "name raised RuntimeError: name is broken; kernel 'brittle_name' cannot be served") in out
    assert "Traceback" not in err
    assert main(["validate", str(artifact)]) == 0
    assert f"{artifact}: note: winner not checked: kernel 'brittle_name'" in capsys.readouterr().out


def test_every_resolver_reports_a_faulty_member_once_with_its_origin_and_keeps_its_own_fault_set(
        plugin: SiteDir, local: Path) -> None:
    from flyconfigs.registry import Resolver

    own, other = Resolver(), Resolver()
    resolvers = [own, other, default_resolver()]

    def faults(resolver: Resolver) -> list[tuple[str, str | None]]:
        return [(p.where, p.distribution) for p in resolver.problems.problems()
                if p.kind == "kernel-error" and "check_key raised ZeroDivisionError" in p.message]

    for resolver in resolvers:
        for m in (4096, 77, 78):
            resolver.resolve("brittle_key", {**KEY, "M": m}, H200_SPEC)
    origin = ("entry point 'brittle_kernels:BAD_KEY' of brittle-kernels 1.0", "brittle-kernels")
    assert [faults(r) for r in resolvers] == [[origin]] * 3
    # Refreshing the default resolver leaves the others' fault sets alone: they do not
    # report the fault again, the default one (a new log) does, once.
    refresh()
    for resolver in resolvers:
        resolver.resolve("brittle_key", {**KEY, "M": 79}, H200_SPEC)
    assert [faults(r) for r in resolvers] == [[origin]] * 3
    assert all(len(r.problems.faults) == 1 for r in resolvers)
