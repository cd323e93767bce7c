"""``flyconfigs publish``: checks before building, nothing left behind, reproducible wheels."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from factories import H200, MI300X, artifact_dict, make_artifact
from flyconfigs.cli import main
from flyconfigs.errors import PublishError
from flyconfigs.publish.build import publish, publish_all
from flyconfigs.schema import SCHEMA_VERSION, load_artifact, write_atomic

sys_key = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
pytestmark = pytest.mark.slow


def _folder(tmp_path: Path, device: dict = MI300X, ms: tuple[int, ...] = (1, 4096)) -> Path:
    folder = tmp_path / "arts"
    for m in ms:
        a = make_artifact(device=device, key={**sys_key, "M": m})
        write_atomic(folder / a.file_name(), a.to_json_bytes())
    return folder


def test_wheel_is_data_only_with_manifest_entry_point_and_requirement(tmp_path: Path) -> None:
    result = publish(_folder(tmp_path), "gfx942", "2.0.0", tmp_path / "dist")
    wheel = next(f for f in result.files if f.suffix == ".whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read("flyconfigs_gfx942-2.0.0.dist-info/METADATA").decode()
        eps = zf.read("flyconfigs_gfx942-2.0.0.dist-info/entry_points.txt").decode()
        init = zf.read("flyconfigs_gfx942/__init__.py").decode()
    assert "flyconfigs_gfx942/manifest.json" in names
    assert sum(n.startswith("flyconfigs_gfx942/artifacts/") for n in names) == 2
    assert all(not n.endswith(".py") or n == "flyconfigs_gfx942/__init__.py" for n in names)
    assert init.startswith('"""') and init.count("\n") == 1
    assert "Requires-Dist: flyconfigs<2,>=1" in meta or "Requires-Dist: flyconfigs>=1,<2" in meta
    assert "AMD Instinct MI300X" in meta and "M: 1–4096" in meta and "## Provenance" in meta
    assert "[flyconfigs.artifacts]\ngfx942 = flyconfigs_gfx942" in eps
    assert {f.suffix for f in result.files} == {".gz", ".whl"}


def test_two_builds_give_identical_wheels(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    first = publish(folder, "gfx942", "1.0.0", tmp_path / "a")
    second = publish(folder, "gfx942", "1.0.0", tmp_path / "b")
    wheels = [next(f for f in r.files if f.suffix == ".whl") for r in (first, second)]
    assert wheels[0].read_bytes() == wheels[1].read_bytes()


def _nothing_left(out: Path) -> bool:
    return not out.exists() or list(out.iterdir()) == []


def test_invalid_artifact_stops_the_build(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "broken.json").write_text('{"schema_version": "1.0"}')
    with pytest.raises(PublishError, match="broken.json: invalid artifact") as info:
        publish(folder, "gfx942", "1.0.0", tmp_path / "out")
    assert info.value.file == str(folder / "broken.json")
    assert _nothing_left(tmp_path / "out")


def test_a_newer_minor_with_unknown_fields_is_refused_not_relabelled(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    data = artifact_dict(device=MI300X, key={**sys_key, "M": 8})
    data["schema_version"] = "1.9"
    data["selection"]["valid_for"] = {"N": "multiple of 8"}
    newer = folder / "newer.json"
    newer.write_text(json.dumps(data))
    assert load_artifact(newer).schema_version == "1.9"  # readable: the loader ignores what it does not know
    with pytest.raises(PublishError, match="would drop selection.valid_for and keep the label 1.9") as info:
        publish(folder, "gfx942", "1.0.0", tmp_path / "out")
    assert info.value.file == str(newer)
    assert _nothing_left(tmp_path / "out")


def test_mixed_target_folder_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    other = make_artifact(device=H200, key=sys_key)
    write_atomic(folder / other.file_name(), other.to_json_bytes())
    with pytest.raises(PublishError, match="belongs to 'sm90', not to target 'gfx942'"):
        publish(folder, "gfx942", "1.0.0", tmp_path / "out")
    assert _nothing_left(tmp_path / "out")


def test_colliding_pair_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path, ms=(4096,))
    twin = make_artifact(device=MI300X, key=sys_key, winner_index=2)
    write_atomic(folder / "copy.json", twin.to_json_bytes())
    with pytest.raises(PublishError, match="collides with"):
        publish(folder, "gfx942", "1.0.0", tmp_path / "out")


@pytest.mark.parametrize("version", ["1.0-beta!!", "", "v1..0"])
def test_bad_version_is_refused(tmp_path: Path, version: str) -> None:
    with pytest.raises(PublishError, match="not a valid PEP 440 version"):
        publish(_folder(tmp_path), "gfx942", version, tmp_path / "out")
    assert _nothing_left(tmp_path / "out")


def test_unreachable_index_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PublishError, match=f"cannot reach the index at http://127.0.0.1:{port}/simple/"):
        publish(_folder(tmp_path), "gfx942", "1.0.0", tmp_path / "out", upload=f"http://127.0.0.1:{port}/")
    assert _nothing_left(tmp_path / "out")


def test_publish_all_reads_each_targets_version(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    for target, device in (("gfx942", MI300X), ("sm90", H200)):
        a = make_artifact(device=device, key=sys_key)
        write_atomic(root / target / a.file_name(), a.to_json_bytes())
        (root / target / "VERSION").write_text("2026.12.1\n")
    results = publish_all(root, tmp_path / "dist")
    assert [(r.distribution, r.version) for r in results] == [("flyconfigs-gfx942", "2026.12.1"), ("flyconfigs-sm90", "2026.12.1")]
    (root / "sm90" / "VERSION").unlink()
    with pytest.raises(PublishError, match="missing VERSION"):
        publish_all(root, tmp_path / "dist2")


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path)
    assert main(["publish", str(folder), "--target", "gfx942", "--version", "1.0", "--out", str(tmp_path / "d")]) == 0
    assert main(["publish", str(folder), "--target", "sm90", "--version", "1.0", "--out", str(tmp_path / "e")]) == 1
    assert "not to target 'sm90'" in capsys.readouterr().err
    assert main(["publish", str(folder), "--version", "1.0"]) == 2
    assert _nothing_left(tmp_path / "e")


def test_a_package_under_any_name_installs_beside_the_official_one(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    official = publish(folder, "gfx942", "1.0.0", tmp_path / "dist")
    mine = publish(folder, "gfx942", "1.0.0", tmp_path / "dist", name="Acme_Tunings-gfx942")
    assert (official.distribution, mine.distribution) == ("flyconfigs-gfx942", "Acme_Tunings-gfx942")
    wheel = next(f for f in mine.files if f.suffix == ".whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read("acme_tunings_gfx942-1.0.0.dist-info/METADATA").decode()
        eps = zf.read("acme_tunings_gfx942-1.0.0.dist-info/entry_points.txt").decode()
        manifest = json.loads(zf.read("flyconfigs_data_acme_tunings_gfx942/manifest.json"))
    with zipfile.ZipFile(next(f for f in official.files if f.suffix == ".whl")) as zf:
        official_names = set(zf.namelist())
    assert "Name: Acme_Tunings-gfx942" in meta and "# Acme_Tunings-gfx942 1.0.0" in meta
    assert "[flyconfigs.artifacts]\ngfx942 = flyconfigs_data_acme_tunings_gfx942" in eps
    assert {n.split("/")[0] for n in names if not n.startswith("acme_")} == {"flyconfigs_data_acme_tunings_gfx942"}
    assert not names & official_names, "no file of one is a file of the other: both install side by side"
    assert manifest["kernels"] == ["rmsnorm"] and manifest["schema_version"] == SCHEMA_VERSION


def test_the_name_must_be_a_distribution_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path)
    with pytest.raises(PublishError, match="--name 'acme tunings' is not a valid distribution name"):
        publish(folder, "gfx942", "1.0.0", tmp_path / "dist", name="acme tunings")
    assert _nothing_left(tmp_path / "dist")
    args = ["publish", str(folder), "--target", "gfx942", "--version", "1.0", "--out", str(tmp_path / "d")]
    assert main([*args, "--name=acme!"]) == 2
    assert "--name 'acme!' is not a valid distribution name" in capsys.readouterr().err
    assert main(["publish", str(folder), "--all", "--name", "acme"]) == 2
    assert main([*args, "--name", "acme-gfx942", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["packages"][0]["distribution"] == "acme-gfx942"


def test_the_imported_corpora_names_carry_their_corpus_families_only(tmp_path: Path) -> None:
    """``flyconfigs-aiter-<target>`` and ``flyconfigs-vllm-fused-moe-<target>`` rank as those
    families' own packages: an RMSNorm tuning published under either is refused, naming it."""
    folder = _folder(tmp_path)
    for name in ("flyconfigs-aiter-gfx942", "flyconfigs-vllm-fused-moe-gfx942"):
        with pytest.raises(PublishError, match=f"--name '{name}' is the name of flyconfigs' imported .* rmsnorm"):
            publish(folder, "gfx942", "1.0.0", tmp_path / "dist", name=name)
    assert _nothing_left(tmp_path / "dist")


def test_publish_all_of_the_repository_gives_each_package_its_own_files_and_nothing_else(tmp_path: Path) -> None:
    """Every release builds in a folder of its own: the releases of one target (the
    official ``flyconfigs-sm90`` and ``flyconfigs-vllm-fused-moe-sm90``, say) never put
    one's files into the other's wheel or sdist."""
    import tarfile

    from flyconfigs.publish.build import NAME_FILE, TARGET_FILE
    from flyconfigs.publish.contents import NOTICE_FILE, collect
    from flyconfigs.publish.layout import import_package, package_files

    root = Path(__file__).resolve().parents[1] / "artifacts"
    results = publish_all(root, tmp_path / "dist")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert len(results) == len(folders)
    owners: dict[str, str] = {}
    for folder, result in zip(folders, results, strict=True):
        target = (folder / TARGET_FILE).read_text().strip() if (folder / TARGET_FILE).is_file() else folder.name
        name = (folder / NAME_FILE).read_text().strip() if (folder / NAME_FILE).is_file() else None
        contents = collect(folder, target)
        module = import_package(target, name)
        expected = set(package_files(target, contents.artifacts, name, tables=contents.tables, packs=contents.packs))
        if contents.notice is not None:
            expected.add(f"{module}/{NOTICE_FILE}")
        wheel = next(f for f in result.files if f.suffix == ".whl")
        sdist = next(f for f in result.files if f.name.endswith(".tar.gz"))
        with zipfile.ZipFile(wheel) as zf:
            in_wheel = {n for n in zf.namelist() if ".dist-info/" not in n}
        assert in_wheel == expected, (folder.name, sorted(in_wheel ^ expected)[:5])
        with tarfile.open(sdist) as tf:
            members = [m.name.split("/", 1)[1] for m in tf.getmembers() if m.isfile()]
        in_sdist = {n for n in members if "/" in n and n.split("/")[0] == module}
        assert in_sdist == expected, (folder.name, sorted(in_sdist ^ expected)[:5])
        others = {n for n in members if "/" in n and n.split("/")[0] != module and not n.split("/")[0].endswith(".egg-info")}
        assert not others, (folder.name, sorted(others)[:5])
        for path in in_wheel:
            assert owners.setdefault(path, result.distribution) == result.distribution, path
