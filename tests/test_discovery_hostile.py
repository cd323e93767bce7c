"""Discovery with whatever else is installed: broken distributions, kernel entry points
that fail or compete, special files, packages pointing outside themselves, and packages
that try to outrank the official one.  Every fixture is a real distribution on a
temporary ``sys.path``."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from conftest import SiteDir
from factories import make_artifact
from flyconfigs import resolve
from flyconfigs.cli import main
from flyconfigs.errors import AmbiguousKernelError, UnknownKernelError
from flyconfigs.registry import declarations, default_resolver, refresh
from flyconfigs.registry.declarations import forget_loaded, kernel_declaration

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
ARGS = ["M=4096", "N=8192", "dtype=bf16", "weight_dtype=bf16"]
H200_SPEC = "sm90:132:NVIDIA H200"


def _dist(root: Path, name: str, entry_points: str, files: dict[str, str] | None = None) -> Path:
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return info


@pytest.fixture(autouse=True)
def _fresh_declarations() -> None:
    forget_loaded()
    yield
    forget_loaded()


def test_a_malformed_entry_points_file_elsewhere_breaks_nothing(site: SiteDir) -> None:
    site.install("sm90", [make_artifact()])
    info = _dist(site.root, "broken-thing", "[console_scripts]\nno equals sign here\n")
    refresh()
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "package"
    problems = default_resolver().problems.problems()
    assert any(p.kind == "bad-distribution" and p.where == str(info) for p in problems)


def test_a_kernel_entry_point_whose_module_is_missing_is_one_clear_error(site: SiteDir,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    _dist(site.root, "ghost-kernels", "[flyconfigs.kernels]\nghost = ghost_kernels_missing:DECL\n")
    refresh()
    with pytest.raises(UnknownKernelError, match="ghost-kernels 1.0 cannot be loaded.*ModuleNotFoundError"):
        kernel_declaration("ghost")
    assert main(["explain", "ghost", *ARGS, "--device", H200_SPEC]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"


def test_a_kernel_name_belongs_to_one_distribution(site: SiteDir, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = site.root / "ran.txt"
    module = f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\nraise SystemExit('hijacked')\n"
    _dist(site.root, "aaa-hijack", "[flyconfigs.kernels]\nrmsnorm = aaa_hijack:SPEC\n", {"aaa_hijack.py": module})
    refresh()
    decl = kernel_declaration("rmsnorm")
    assert type(decl).__module__ == "flyconfigs.kernels.rmsnorm.declaration"
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    assert not marker.exists()
    assert any(p.kind == "kernel-collision" and p.distribution == "aaa-hijack" for p in declarations.PROBLEMS.problems())
    # Chosen on purpose, the other declaration is the one loaded (and here it fails loudly).
    monkeypatch.setenv("FLYCONFIGS_KERNELS", "rmsnorm=aaa-hijack")
    forget_loaded()
    with pytest.raises(UnknownKernelError, match="aaa-hijack 1.0 cannot be loaded"):
        kernel_declaration("rmsnorm")
    assert marker.exists()


def test_two_third_party_declarations_of_one_name_need_a_choice(site: SiteDir, monkeypatch: pytest.MonkeyPatch) -> None:
    _dist(site.root, "one-kernels", "[flyconfigs.kernels]\nfoo = flyconfigs.kernels.rmsnorm:SPEC\n")
    _dist(site.root, "two-kernels", "[flyconfigs.kernels]\nfoo = flyconfigs.kernels.rmsnorm:SPEC\n")
    refresh()
    with pytest.raises(AmbiguousKernelError, match="one-kernels 1.0, two-kernels 1.0.*FLYCONFIGS_KERNELS=foo="):
        kernel_declaration("foo")
    monkeypatch.setenv("FLYCONFIGS_KERNELS", "foo=two-kernels")
    with pytest.raises(UnknownKernelError, match="declares a kernel named 'rmsnorm'"):
        kernel_declaration("foo")


def test_special_files_are_refused_and_never_block(site: SiteDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = tmp_path / "local"
    local.mkdir()
    os.mkfifo(local / "fifo.json")
    (local / "zero.json").symlink_to("/dev/zero")
    monkeypatch.setenv("FLYCONFIGS_PATH", str(local))
    folder = site.install("sm90", [make_artifact()])
    row = json.loads((folder / "manifest.json").read_text())["artifacts"][0]
    (folder / row["file"]).unlink()
    os.mkfifo(folder / row["file"])
    refresh()
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    messages = [p.message for p in default_resolver().problems.problems()]
    assert sum("not a regular file" in m for m in messages) == 3


def test_validate_refuses_special_files_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/dev/zero"]) == 1
    assert "not a regular file" in capsys.readouterr().out


def test_an_entry_point_cannot_lead_outside_its_package(site: SiteDir, tmp_path: Path) -> None:
    elsewhere = site.install("sm90", [make_artifact()], name="flyconfigs-sm90")
    outside = tmp_path / "outside"
    elsewhere.rename(outside)
    site.uninstall("sm90")
    _dist(site.root, "flyconfigs-sm90", f"[flyconfigs.artifacts]\nsm90 = {outside}\n")
    refresh()
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    problems = default_resolver().problems.problems()
    assert any(p.kind == "unsafe-path" and "dotted identifiers" in p.message for p in problems)


def test_precedence_between_packages_is_chosen_not_alphabetical(site: SiteDir, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    official = make_artifact()
    rogue = make_artifact(winner_index=2)
    site.install("sm90", [official])
    site.install("sm90", [rogue], name="aaa-flyconfigs-sm90", module="aaa_flyconfigs_sm90")
    monkeypatch.setenv("FLYCONFIGS_DEVICE", H200_SPEC)
    refresh()
    r = resolve("rmsnorm", KEY)
    assert r.origin == "flyconfigs-sm90" and dict(r.config) == dict(official.winner.config)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "(unexpected)" in out and "FLYCONFIGS_PACKAGES" in out
    monkeypatch.setenv("FLYCONFIGS_PACKAGES", "aaa-flyconfigs-sm90,flyconfigs-sm90")
    refresh()
    r = resolve("rmsnorm", KEY)
    assert r.origin == "aaa-flyconfigs-sm90" and dict(r.config) == dict(rogue.winner.config)
    assert main(["explain", "rmsnorm", *ARGS]) == 0
    out = capsys.readouterr().out
    assert "package aaa-flyconfigs-sm90 1.0.0 (listed in FLYCONFIGS_PACKAGES); package flyconfigs-sm90 1.0.0" in out
    code = main(["doctor"])
    assert code == 0, capsys.readouterr().out


def test_a_missing_override_folder_is_reported(site: SiteDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path / "nope"))
    refresh()
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    assert any(p.kind == "unreadable-source" for p in default_resolver().problems.problems())


def test_an_unreadable_entry_points_file_is_reported_not_skipped_silently(site: SiteDir) -> None:
    info = _dist(site.root, "odd-thing", "")
    (info / "entry_points.txt").unlink()
    (info / "entry_points.txt").mkdir()  # read_text() returns None for it, as for an unreadable file
    refresh()
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    assert any(p.kind == "bad-distribution" and "cannot be read" in p.message for p in default_resolver().problems.problems())
