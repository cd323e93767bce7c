"""End to end with real parts: build the core wheel and data packages, serve them from a
real pypiserver on loopback, upload with twine, pip-install into fresh virtual
environments and resolve through entry-point discovery in a subprocess there."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from factories import H200, MI300X, make_artifact
from flyconfigs.cli import main
from flyconfigs.errors import PublishError
from flyconfigs.publish.build import publish, upload_files
from flyconfigs.publish.index import index_versions
from flyconfigs.schema import write_atomic

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from local_index import LocalIndex, build_core_wheel, dependency_wheels, free_port, fresh_venv  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[1]
KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
MI300X_SPEC = "gfx942:304:AMD Instinct MI300X:sramecc+,xnack-"
H200_SPEC = "sm90:132:NVIDIA H200"

RESOLVE = """
import json, sys, flyconfigs
out = {}
for spec in sys.argv[1:]:
    r = flyconfigs.resolve("rmsnorm", %r, device=spec)
    out[spec] = {"source": r.source, "origin": r.origin, "version": r.version, "config": dict(r.config)}
print(json.dumps(out))
""" % (KEY,)


def _artifacts(folder: Path, device: dict, winner: int) -> Path:
    for m in (1024, 4096):
        artifact = make_artifact(device=device, key={**KEY, "M": m}, winner_index=winner)
        write_atomic(folder / artifact.file_name(), artifact.to_json_bytes())
    return folder


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIndex]:
    folder = tmp_path_factory.mktemp("index")
    dependency_wheels(folder)
    with LocalIndex(folder) as served:
        yield served


def _pip(python: Path, index: LocalIndex, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--index-url", index.simple, *args],
                   check=True, capture_output=True)


def _resolve(python: Path, *specs: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_") and k != "PYTHONPATH"}
    env["FLYCONFIGS_NO_GPU_DETECT"] = "1"
    done = subprocess.run([str(python), "-c", RESOLVE, *specs], capture_output=True, text=True, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_publish_upload_install_upgrade_uninstall_and_hashes(index: LocalIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWINE_USERNAME", "test")
    monkeypatch.setenv("TWINE_PASSWORD", "test")
    dist = tmp_path / "dist"
    core = build_core_wheel(ROOT, dist)
    v1 = publish(_artifacts(tmp_path / "gfx942-v1", MI300X, winner=1), "gfx942", "1.0.0", dist)
    upload_files([core, *v1.files], index.url)

    venv = fresh_venv(tmp_path / "venv")
    _pip(venv, index, "flyconfigs-gfx942")
    served = _resolve(venv, MI300X_SPEC, H200_SPEC)
    assert served[MI300X_SPEC]["source"] == "package"
    assert (served[MI300X_SPEC]["origin"], served[MI300X_SPEC]["version"]) == ("flyconfigs-gfx942", "1.0.0")
    assert served[MI300X_SPEC]["config"] == make_artifact(device=MI300X, key=KEY, winner_index=1).winner.config
    assert served[H200_SPEC]["source"] == "default"

    v2 = publish(_artifacts(tmp_path / "gfx942-v2", MI300X, winner=3), "gfx942", "1.1.0", dist, upload=index.url)
    assert v2.uploaded_to == index.url
    _pip(venv, index, "--upgrade", "flyconfigs-gfx942")
    upgraded = _resolve(venv, MI300X_SPEC)[MI300X_SPEC]
    assert upgraded["version"] == "1.1.0"
    assert upgraded["config"] == make_artifact(device=MI300X, key=KEY, winner_index=3).winner.config

    publish(_artifacts(tmp_path / "sm90", H200, winner=2), "sm90", "1.0.0", dist, upload=index.url)
    _pip(venv, index, "flyconfigs-sm90")
    both = _resolve(venv, MI300X_SPEC, H200_SPEC)
    assert both[MI300X_SPEC]["origin"] == "flyconfigs-gfx942"
    assert both[H200_SPEC]["origin"] == "flyconfigs-sm90"
    assert both[H200_SPEC]["config"] == make_artifact(key=KEY, winner_index=2).winner.config

    # From the checkout's root, with the wheel installed, the source tree is what imports,
    # whole (every subpackage resolves inside it), and it still finds the installed packages.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_") and k != "PYTHONPATH"}
    source = subprocess.run([str(venv), "-c", "import flyconfigs.registry, flyconfigs.tuner.run as t; "
                             "print(flyconfigs.registry.__file__); print(t.__file__)"],
                            cwd=ROOT, capture_output=True, text=True, check=True, env=env).stdout.split()
    assert all(Path(f).is_relative_to(ROOT) for f in source), source
    listed = subprocess.run([str(venv), "-m", "flyconfigs", "list"], cwd=ROOT, capture_output=True, text=True, check=True,
                            env=env)
    assert "flyconfigs-sm90" in listed.stdout

    subprocess.run([str(venv), "-m", "pip", "uninstall", "-q", "-y", "flyconfigs-gfx942"], check=True)
    after = _resolve(venv, MI300X_SPEC, H200_SPEC)
    assert after[MI300X_SPEC]["source"] == "default"
    assert after[H200_SPEC]["origin"] == "flyconfigs-sm90"

    requirements = tmp_path / "requirements.txt"
    lines = []
    chosen = {"flyconfigs_gfx942": "1.1.0"}
    for wheel in sorted(index.folder.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        if name in chosen and version != chosen[name]:
            continue
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines.append(f"{name.replace('_', '-')}=={version} --hash=sha256:{digest}")
    requirements.write_text("\n".join(lines) + "\n")
    hashed = fresh_venv(tmp_path / "hashed")
    _pip(hashed, index, "--require-hashes", "--only-binary=:all:", "-r", str(requirements))
    assert _resolve(hashed, MI300X_SPEC)[MI300X_SPEC]["version"] == "1.1.0"


def test_upload_refuses_a_version_the_index_already_has(index: LocalIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWINE_USERNAME", "test")
    monkeypatch.setenv("TWINE_PASSWORD", "test")
    folder = _artifacts(tmp_path / "sm90", H200, winner=1)
    publish(folder, "sm90", "5.0.0", tmp_path / "dist", upload=index.url)
    from flyconfigs.errors import PublishError

    with pytest.raises(PublishError, match="already has flyconfigs-sm90 5.0.0"):
        publish(folder, "sm90", "4.9.0", tmp_path / "out", upload=index.url)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_404_means_no_such_project_only_where_an_index_answers(index: LocalIndex, tmp_path: Path) -> None:
    assert index_versions(index.simple, "flyconfigs-nowhere") == []
    with pytest.raises(PublishError, match=f"no package index at {index.url}wrong/simple/"):
        index_versions(f"{index.url}wrong/simple/", "flyconfigs-sm90")
    # A wrong upload URL's guessed <upload>/simple/ answers 404 too: refused before anything is built.
    folder = _artifacts(tmp_path / "sm90", H200, winner=1)
    with pytest.raises(PublishError, match=f"no package index at {index.url}legacy/simple/"):
        publish(folder, "sm90", "9.0.0", tmp_path / "out", upload=f"{index.url}legacy/")
    assert not (tmp_path / "out").exists()


def test_publish_all_checks_the_index_url_it_is_given(index: LocalIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TWINE_USERNAME", "test")
    monkeypatch.setenv("TWINE_PASSWORD", "test")
    root = tmp_path / "artifacts"
    _artifacts(root / "sm90", H200, winner=1)
    (root / "sm90" / "VERSION").write_text("9.1.0\n")
    closed = f"http://127.0.0.1:{free_port()}/simple/"
    assert main(["publish", "--all", str(root), "--out", str(tmp_path / "out"), "--upload", index.url,
                 "--index-url", closed]) == 1
    assert f"cannot reach the index at {closed}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not list(index.folder.glob("flyconfigs_sm90-9.1.0*"))


def test_a_package_under_its_own_name_is_served_beside_the_official_one(index: LocalIndex, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWINE_USERNAME", "test")
    monkeypatch.setenv("TWINE_PASSWORD", "test")
    dist = tmp_path / "dist"
    if not any(index.folder.glob("flyconfigs-[0-9]*.whl")):
        upload_files([build_core_wheel(ROOT, dist)], index.url)
    publish(_artifacts(tmp_path / "official", H200, winner=2), "sm90", "9.0.0", dist, upload=index.url)
    mine = tmp_path / "mine"
    _artifacts(mine, H200, winner=4)
    small = make_artifact(key={**KEY, "M": 64}, winner_index=5)
    write_atomic(mine / small.file_name(), small.to_json_bytes())
    assert main(["publish", str(mine), "--name", "acme-tunings-sm90", "--target", "sm90", "--version", "1.0.0",
                 "--out", str(dist), "--upload", index.url]) == 0

    venv = fresh_venv(tmp_path / "venv")
    _pip(venv, index, "flyconfigs-sm90==9.0.0", "acme-tunings-sm90")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_") and k != "PYTHONPATH"}
    env["FLYCONFIGS_NO_GPU_DETECT"] = "1"
    script = ("import json, flyconfigs\nout = {}\nfor m in (64, 4096):\n"
              f"    r = flyconfigs.resolve('rmsnorm', {{**{KEY!r}, 'M': m}}, {H200_SPEC!r})\n"
              "    out[m] = [r.origin, dict(r.config)]\nprint(json.dumps(out))\n")
    done = subprocess.run([str(venv), "-c", script], capture_output=True, text=True, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    served = json.loads(done.stdout)
    assert served["64"] == ["acme-tunings-sm90", small.winner.config]
    assert served["4096"] == ["flyconfigs-sm90", make_artifact(key=KEY, winner_index=2).winner.config]
    listed = subprocess.run([str(venv), "-m", "flyconfigs", "list", "--json"], capture_output=True, text=True, env=env,
                            cwd="/")
    packages = {p["distribution"]: p for p in json.loads(listed.stdout)["packages"]}
    assert packages["acme-tunings-sm90"]["families"] == ["rmsnorm"] and packages["flyconfigs-sm90"]["version"] == "9.0.0"
    doctor = subprocess.run([str(venv), "-m", "flyconfigs", "doctor", "--json"], capture_output=True, text=True,
                            env={**env, "FLYCONFIGS_DEVICE": H200_SPEC}, cwd="/")
    collisions = json.loads(doctor.stdout)["collisions"]
    assert len(collisions) == 2 and all(c["standings"] == ["official", "third-party"] for c in collisions), collisions


def test_two_packages_of_one_target_built_together_uninstall_apart(index: LocalIndex, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``publish --all`` over two folders of one target (the official package and one
    under its own name, built one after the other): both install into one environment,
    and uninstalling the second leaves the first whole and serving."""
    monkeypatch.setenv("TWINE_USERNAME", "test")
    monkeypatch.setenv("TWINE_PASSWORD", "test")
    dist = tmp_path / "dist"
    if not any(index.folder.glob("flyconfigs-[0-9]*.whl")):
        upload_files([build_core_wheel(ROOT, dist)], index.url)
    root = tmp_path / "artifacts"
    _artifacts(root / "sm90", H200, winner=2)
    (root / "sm90" / "VERSION").write_text("9.2.0\n")
    theirs = root / "theirs-sm90"  # sorts after sm90: built second
    small = make_artifact(key={**KEY, "M": 64}, winner_index=5)
    write_atomic(theirs / small.file_name(), small.to_json_bytes())
    (theirs / "VERSION").write_text("1.0.0\n")
    (theirs / "TARGET").write_text("sm90\n")
    (theirs / "NAME").write_text("acme-theirs-sm90\n")
    assert main(["publish", "--all", str(root), "--out", str(dist)]) == 0
    capsys.readouterr()
    wheels = [str(dist / "flyconfigs_sm90-9.2.0-py3-none-any.whl"), str(dist / "acme_theirs_sm90-1.0.0-py3-none-any.whl")]

    venv = fresh_venv(tmp_path / "venv")
    _pip(venv, index, *wheels)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_") and k != "PYTHONPATH"}
    env["FLYCONFIGS_NO_GPU_DETECT"] = "1"
    script = ("import json, flyconfigs\nout = {}\nfor m in (64, 4096):\n"
              f"    r = flyconfigs.resolve('rmsnorm', {{**{KEY!r}, 'M': m}}, {H200_SPEC!r})\n"
              "    out[m] = [r.origin, r.key_match, dict(r.config)]\nprint(json.dumps(out))\n")

    def served() -> dict:
        done = subprocess.run([str(venv), "-c", script], capture_output=True, text=True, env=env, cwd="/")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    official = make_artifact(key=KEY, winner_index=2).winner.config
    assert served() == {"64": ["acme-theirs-sm90", "exact", small.winner.config],
                        "4096": ["flyconfigs-sm90", "exact", official]}
    subprocess.run([str(venv), "-m", "pip", "uninstall", "-q", "-y", "acme-theirs-sm90"], check=True)
    after = served()
    assert after["4096"] == ["flyconfigs-sm90", "exact", official]
    assert after["64"][0] == "flyconfigs-sm90"
    doctor = subprocess.run([str(venv), "-m", "flyconfigs", "doctor", "--json", "--device", H200_SPEC],
                            capture_output=True, text=True, env=env, cwd="/")
    report = json.loads(doctor.stdout)
    assert doctor.returncode == 0 and report["problems"] == [], report["problems"]
    assert [(p["distribution"], p["artifacts"]) for p in report["packages"]] == [("flyconfigs-sm90", 2)]
