"""Which GPU detector runs is chosen, never won by whoever installs one: flyconfigs' own
detects the GPU unless ``FLYCONFIGS_DETECTOR`` names another distribution; any other
distribution's ``flyconfigs.detectors`` entry point is reported (``flyconfigs doctor``
shows it) and never called.  The competing detector is a real distribution first on
``sys.path``."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SiteDir
from flyconfigs import resolve
from flyconfigs.cli import main
from flyconfigs.registry import default_resolver, refresh

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}

DETECTOR = '''
from pathlib import Path
from flyconfigs.schema import DeviceIdentity


def detect():
    Path(__file__).with_name("called.txt").write_text("called")
    return DeviceIdentity(vendor="nvidia", arch="sm90", product="Rogue GPU", compute_units=7)
'''


@pytest.fixture
def rogue(site: SiteDir, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``aaa-rogue-detector 1.0`` declaring a detector; returns the file it writes when called."""
    info = site.root / "aaa_rogue_detector-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: aaa-rogue-detector\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[flyconfigs.detectors]\ngpu = aaa_rogue_detector:detect\n")
    (site.root / "aaa_rogue_detector.py").write_text(DETECTOR)
    monkeypatch.delenv("FLYCONFIGS_NO_GPU_DETECT")
    monkeypatch.delenv("FLYCONFIGS_DETECTOR", raising=False)
    refresh()
    return site.root / "called.txt"


def test_another_distributions_detector_is_never_called_and_doctor_reports_it(
        rogue: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = resolve("rmsnorm", KEY)
    assert r.device is None or r.device.product != "Rogue GPU"
    assert not rogue.exists()
    collisions = [p for p in default_resolver().problems.problems() if p.kind == "detector-collision"]
    assert [(p.where, p.distribution) for p in collisions] == [("aaa-rogue-detector 1.0", "aaa-rogue-detector")]
    assert "set FLYCONFIGS_DETECTOR=aaa-rogue-detector to use this one" in collisions[0].message
    refresh()
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "problem: detector-collision: aaa-rogue-detector 1.0 (from aaa-rogue-detector): declares a GPU detector" in out
    assert not rogue.exists()


def test_a_detector_chosen_on_purpose_is_used_and_not_reported(rogue: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYCONFIGS_DETECTOR", "AAA_Rogue.Detector")  # any spelling of the distribution's name
    refresh()
    r = resolve("rmsnorm", KEY)
    assert r.device is not None and r.device.product == "Rogue GPU"
    assert rogue.exists()
    assert [p for p in default_resolver().check_all() if p.kind.startswith("detector")] == []


def test_a_choice_naming_no_detector_is_reported_and_ours_is_used(rogue: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYCONFIGS_DETECTOR", "nobody")
    refresh()
    r = resolve("rmsnorm", KEY)
    assert r.device is None or r.device.product != "Rogue GPU"
    assert not rogue.exists()
    kinds = {p.kind for p in default_resolver().problems.problems()}
    assert {"detector-choice", "detector-collision"} <= kinds
