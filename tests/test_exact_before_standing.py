"""The steps come before standing, on purpose: a third party's exact key measured for this
device is served over the official package's (and your folder's) nearest keys, since a
measurement of the asked key beats a guess from a neighbouring one; ``explain`` says that
a source of a higher standing had a nearer key and why it was not served."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SiteDir
from factories import make_artifact
from flyconfigs.cli import main
from flyconfigs.registry import Resolver, default_resolver
from flyconfigs.schema import write_atomic

KEY = {"M": 64, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"


def test_a_third_partys_exact_key_beats_the_official_nearest_and_explain_says_so(
        site: SiteDir, capsys: pytest.CaptureFixture[str]) -> None:
    site.install("sm90", [make_artifact(key={**KEY, "M": 128}, winner_index=1)])
    theirs = make_artifact(key=KEY, winner_index=2)
    site.install("sm90", [theirs], name="acme-tunings", module="acme")
    served = default_resolver().resolve("rmsnorm", KEY, H200_SPEC)
    assert (served.origin, served.key_match) == ("acme-tunings", "exact")
    assert dict(served.config) == dict(theirs.winner.config)
    assert main(["explain", "rmsnorm", *[f"{k}={v}" for k, v in KEY.items()], "--device", H200_SPEC]) == 0
    out = capsys.readouterr().out
    assert "has a nearer key {'M': 128" in out and "(official)" in out
    assert "an exact key of any standing is served before a nearest one" in out


def test_your_folders_nearest_key_does_not_beat_a_packages_exact_key(site: SiteDir, tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    mine = make_artifact(key={**KEY, "M": 32}, winner_index=1)
    write_atomic(folder / mine.file_name(), mine.to_json_bytes())
    packaged = make_artifact(key=KEY, winner_index=2)
    site.install("sm90", [packaged])
    resolver = Resolver([str(folder)])
    served, trace = resolver.explain("rmsnorm", KEY, H200_SPEC)
    assert served.source == "package" and dict(served.config) == dict(packaged.winner.config)
    assert any(str(folder) in s.outcome and "has a nearer key" in s.outcome for s in trace)
