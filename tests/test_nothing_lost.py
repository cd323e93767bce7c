"""Nothing the user made is lost or relabelled, and no file can crash serving: an import
or a prediction never replaces a measured artifact or one of a newer schema; a tool
never removes another host's temporaries; a publish that fails leaves no half release;
publish refuses the names flyconfigs owns; a winner the loader would refuse is neither
written by the tuner nor shipped by publish; an arch with a hex letter in its major is
refused cleanly wherever it appears."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from factories import H200, MI300X, artifact_dict, make_artifact, predicted_artifact_dict
from flyconfigs import resolve
from flyconfigs.cli import main
from flyconfigs.errors import ArtifactError, PublishError, TuneError
from flyconfigs.registry import Resolver
from flyconfigs.schema import Artifact, write_atomic

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
H200_SPEC = "sm90:132:NVIDIA H200"


def _imported(**kwargs: Any) -> Artifact:
    data = artifact_dict(**kwargs)
    data["selection"] = {"rule": "imported"}
    return Artifact.model_validate(data)


# -- import and predict never replace what says more ----------------------------------------


def test_an_import_never_replaces_an_artifact_of_a_newer_schema(tmp_path: Path) -> None:
    from flyconfigs.adapters.imported import write_imported

    imported = _imported(key=KEY)
    newer = artifact_dict(key=KEY, winner_index=2)
    for version, extra in (("2.0", {}), ("1.99", {"selection": {**newer["selection"], "rule": "measured-v2"}})):
        target = tmp_path / imported.file_name()
        target.write_text(json.dumps({**newer, **extra, "schema_version": version}))
        before = target.read_bytes()
        with pytest.raises(ArtifactError, match="newer than this flyconfigs reads"):
            write_imported(imported, tmp_path)
        assert target.read_bytes() == before


def test_an_import_replaces_an_earlier_import_and_never_a_measurement(tmp_path: Path) -> None:
    from flyconfigs.adapters.imported import write_imported

    write_imported(_imported(key=KEY, winner_index=1), tmp_path)
    path = write_imported(_imported(key=KEY, winner_index=2), tmp_path)
    measured = make_artifact(key=KEY, winner_index=3)
    write_atomic(path, measured.to_json_bytes())
    with pytest.raises(ArtifactError, match="measured"):
        write_imported(_imported(key=KEY, winner_index=2), tmp_path)
    assert path.read_bytes() == measured.to_json_bytes()


def test_a_prediction_never_replaces_a_measurement(tmp_path: Path) -> None:
    from flyconfigs.tuner.emit import write_artifact

    measured = make_artifact(device=MI300X, key=KEY, winner_index=3)
    path = write_atomic(tmp_path / measured.file_name(), measured.to_json_bytes())
    predicted = Artifact.model_validate(predicted_artifact_dict(device=MI300X, key=KEY, winner_index=2))
    with pytest.raises(TuneError, match="holds a measured artifact"):
        write_artifact(tmp_path, predicted)
    assert path.read_bytes() == measured.to_json_bytes()
    # A measurement replaces a prediction, and a prediction an earlier prediction.
    write_atomic(path, predicted.to_json_bytes())
    assert write_artifact(tmp_path, predicted) == path
    assert write_artifact(tmp_path, measured) == path and path.read_bytes() == measured.to_json_bytes()


def test_the_tuner_never_writes_a_winner_the_loader_would_refuse(tmp_path: Path) -> None:
    from flyconfigs.tuner.emit import write_artifact

    data = artifact_dict(key={**KEY, "N": 8190}, winner_index=0)  # 16-byte vectors do not divide a row of 8190
    with pytest.raises(TuneError, match="would never be served"):
        write_artifact(tmp_path, Artifact.model_validate(data))
    assert list(tmp_path.iterdir()) == []


# -- temporaries ------------------------------------------------------------------------------


def test_a_write_names_its_host_and_only_this_hosts_dead_temporaries_are_removed(tmp_path: Path) -> None:
    from flyconfigs.schema.jsonio import _host_tag, remove_stale_temporaries

    host = _host_tag()
    dead = 2**22 + 12345  # above any pid_max of a default Linux kernel: no such process
    ours = tmp_path / f".a.json.{host}.{dead}.abcd1234.tmp"
    theirs = tmp_path / f".a.json.elsewhere.{dead}.abcd1234.tmp"
    old_form = tmp_path / f".a.json.{dead}.abcd1234.tmp"
    for path in (ours, theirs, old_form):
        path.write_text("{")
    assert remove_stale_temporaries(tmp_path) == [ours]
    assert theirs.exists() and old_form.exists()


# -- publish ----------------------------------------------------------------------------------


def _folder(root: Path, *artifacts: Artifact) -> Path:
    folder = root / "arts"
    for a in artifacts or (make_artifact(device=MI300X, key=KEY),):
        write_atomic(folder / a.file_name(), a.to_json_bytes())
    return folder


@pytest.mark.parametrize("name", ["flyconfigs", "flyconfigs-gfx942", "Flyconfigs_SM90.x", "pip", "flyconfigs-next"])
def test_publish_refuses_the_names_flyconfigs_owns_and_installed_tools(tmp_path: Path, name: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, make_artifact(key=KEY))
    assert main(["publish", str(folder), "--target", "sm90", "--version", "1.0", "--name", name,
                 "--out", str(tmp_path / "dist")]) == 2
    assert "--name" in capsys.readouterr().err
    assert not (tmp_path / "dist").exists()


@pytest.mark.parametrize("target", ["../x", "SM90", "", "sm 90"])
def test_publish_refuses_a_malformed_target_as_usage(tmp_path: Path, target: str) -> None:
    assert main(["publish", str(_folder(tmp_path)), "--target", target, "--version", "1.0",
                 "--out", str(tmp_path / "dist")]) == 2


def test_publish_refuses_a_winner_the_loader_would_refuse(tmp_path: Path) -> None:
    from flyconfigs.publish.build import collect_artifacts

    bad = Artifact.model_validate(artifact_dict(key={**KEY, "N": 8190}, winner_index=0))
    with pytest.raises(PublishError, match="would never serve its winner"):
        collect_artifacts(_folder(tmp_path, bad), "sm90")


def test_a_publish_that_cannot_write_every_file_leaves_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flyconfigs.publish import build
    from flyconfigs.publish.build import PublishResult

    built = tmp_path / "built"
    built.mkdir()
    files = (built / "pkg-1.0.tar.gz", built / "pkg-1.0-py3-none-any.whl")
    for f in files:
        f.write_bytes(b"x" * 100)
    real = tempfile.mkstemp
    calls = []

    def full_disk(*args: Any, **kwargs: Any) -> tuple[int, str]:
        calls.append(args)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(build.tempfile, "mkstemp", full_disk)
    out = tmp_path / "out"
    with pytest.raises(PublishError, match="nothing was placed"):
        build._place([PublishResult("pkg", "1.0", files, 1, None)], out, None)
    assert list(out.iterdir()) == []


# -- an arch with a hex letter in its major ------------------------------------------------------


def _flydsl(folder: Path, arch: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"kern-{arch}.json").write_text(json.dumps({
        "version": 1, "config": {"a": 1},
        "identity": {"name": "kern", "key": {"M": 1}, "device": {"name": "X", "arch": arch, "compute_units": 304}}}))


@pytest.mark.parametrize("arch", ["gfxa42", "gfx1a00"])
def test_a_file_of_a_malformed_arch_never_crashes_serving(tmp_path: Path, arch: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _flydsl(tmp_path / "local", arch)
    resolver = Resolver([str(tmp_path / "local")], detector=None)
    assert resolver.resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    assert resolver.resolve("rmsnorm", KEY, "MI300X").source == "default"
    assert any(p.kind == "invalid-artifact" and arch in p.message for p in resolver.check_all())
    monkeypatch.setenv("FLYCONFIGS_PATH", str(tmp_path / "local"))
    from flyconfigs.registry import refresh

    refresh()
    assert resolve("rmsnorm", KEY, H200_SPEC).source == "default"
    assert main(["doctor", "--device", "sm90"]) == 1
    assert main(["validate", str(tmp_path / "local")]) == 1


@pytest.mark.parametrize("argv", [
    ["explain", "rmsnorm", "M=1", "N=8", "dtype=bf16", "weight_dtype=bf16", "--device", "gfxa42"],
    ["doctor", "--device", "gfx1a00"],
    ["import", "vllm", "IN", "--out", "OUT", "--device", "gfxa42:304:X"],
])
def test_a_malformed_arch_on_the_command_line_is_usage(tmp_path: Path, argv: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "IN").mkdir()
    argv = [str(tmp_path / a) if a in ("IN", "OUT") else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
