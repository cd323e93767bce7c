"""What a new user meets first on the command line: ``explain`` completes a key as the
tuner does and counts the override files it cannot serve; ``list`` says which kernels
are served-only declarations; ``tune``'s GPU is ``--gpu N`` (``--device`` names a device
everywhere; ``tune --device N`` is still read as before); and the documentation says
what the commands do (``publish --name``, ``--cross-check``, schema 1.5, ``predict`` for
gfx942 through a ROCm prefix)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flyconfigs.cli import main
from flyconfigs.schema.models import SCHEMA_VERSION

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out)


def test_explain_fills_in_weight_dtype_as_the_tuner_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "rmsnorm", "M=4096", "N=8192", "dtype=bf16", "--device", "H100"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("key: weight_dtype=bf16 filled in, as the tuner fills it in\n")
    assert main(["explain", "rmsnorm", "M=4096", "N=8192", "dtype=fp16", "--device", "H100", "--json"]) == 0
    shown = _json(capsys)
    assert shown["filled_in"] == {"weight_dtype": "fp16"} and shown["resolution"]["key"]["weight_dtype"] == "fp16"
    # a key that names it is taken as given
    assert main(["explain", "rmsnorm", "M=1", "N=8192", "dtype=bf16", "weight_dtype=fp32", "--device", "H100"]) == 0
    assert "filled in" not in capsys.readouterr().out


def test_explain_counts_the_override_files_it_cannot_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    preview = tmp_path / "preview"
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--key-grid", "M=1,4096 N=8192 dtype=bf16",
                 "--out", str(preview), "--json"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("FLYCONFIGS_PATH", str(preview))
    from flyconfigs.registry import refresh

    refresh()
    try:
        assert main(["explain", "rmsnorm", "M=4096", "N=8192", "dtype=bf16", "--device", "H100"]) == 0
    finally:
        monkeypatch.delenv("FLYCONFIGS_PATH")
        refresh()
    sources = [line for line in capsys.readouterr().out.splitlines() if "sources, in precedence order" in line]
    assert sources == ["2. sources, in precedence order: none (2 files of FLYCONFIGS_PATH skipped: 2 for simulated "
                       "(made by the test backend: never served to a real device))"]


def test_list_says_which_kernels_only_serve_imported_configs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert "served only" not in lines["rmsnorm"] and "served only" not in lines["fused_add_rmsnorm"]
    for name in ("vllm_fused_moe", "aiter_gemm_a8w8_bpreshuffle", "aiter_gemm_a8w8_blockscale"):
        assert "served only: declared to serve configs imported with `flyconfigs import`" in lines[name]
    assert main(["list", "--json"]) == 0
    tunable = {k["name"]: k["tunable"] for k in _json(capsys)["kernels"]}
    assert tunable["rmsnorm"] and not tunable["vllm_fused_moe"]


def test_tune_chooses_its_gpu_with_gpu_and_still_reads_device_n(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    grid = ["--backend", "simulated", "--key-grid", "M=1 N=1024 dtype=bf16", "--json"]
    assert main(["tune", "rmsnorm", *grid, "--gpu", "0", "--out", str(tmp_path / "a")]) == 0
    assert _json(capsys)["tuned"] == 1
    assert main(["tune", "rmsnorm", *grid, "--device", "0", "--out", str(tmp_path / "b")]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["tuned"] == 1
    assert "note: --device 0 is read as --gpu 0" in captured.err
    assert main(["tune", "rmsnorm", *grid, "--device", "H100", "--out", str(tmp_path / "c")]) == 2
    capsys.readouterr()
    assert main(["tune", "rmsnorm", *grid, "--device", "0", "--gpu", "0", "--out", str(tmp_path / "d")]) == 2


def test_tune_device_spec_is_a_usage_error_that_says_where_to_go(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "rmsnorm", "--backend", "simulated", "--device", "H100", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "tune measures the GPUs of this host, chosen by --gpu N or --devices" in err
    assert "--device SPEC names a device in explain, doctor and predict" in err


def test_the_cross_check_help_and_the_docs_say_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "re-tune every key on a second GPU of the same identity" in help_text
    assert "a key whose GPU has no twin is not re-checked" in help_text
    for page in ("tuning.md", "cli.md"):
        text = " ".join((DOCS / page).read_text(encoding="utf-8").split())
        assert "re-tunes every key on a second GPU of the same identity" in text, page
        assert "sample of keys" not in text, page


def test_the_cli_page_names_every_option_of_publish_and_tune(capsys: pytest.CaptureFixture[str]) -> None:
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    for command in ("publish", "tune", "explain", "doctor", "predict"):
        assert main([command, "--help"]) == 0
        options = set(re.findall(r"(--[a-z][a-z-]+)", capsys.readouterr().out)) - {"--help", "--traceback"}
        missing = sorted(o for o in options if f"{o}" not in page)
        assert not missing, f"docs/cli.md does not name {command} {missing}"


def test_the_schema_page_and_the_changelog_reach_the_current_version() -> None:
    schema_page = (DOCS / "schema.md").read_text(encoding="utf-8")
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f'today `"{SCHEMA_VERSION}"`' in schema_page
    major, minor = (int(p) for p in SCHEMA_VERSION.split("."))
    for m in range(minor + 1):
        assert f"**{major}.{m}** —" in schema_page, f"docs/schema.md has no release note for {major}.{m}"
        assert f"- **{major}.{m}**:" in changelog, f"CHANGELOG.md has no schema line for {major}.{m}"


def test_the_docs_say_how_predict_runs_for_gfx942_without_rocm() -> None:
    for page in ("cli.md", "tuning.md"):
        text = " ".join((DOCS / page).read_text(encoding="utf-8").split())
        assert "scripts/rocm-prefix.sh PREFIX" in text, page
        assert "PREFIX/run python -m flyconfigs predict rmsnorm --device MI300X" in text, page


def test_doctor_detects_without_platformdirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Only the bindings' platformdirs is missing (the compile cache's folder): the GPU is
    looked for all the same, and doctor shows no raw ModuleNotFoundError."""
    import sys

    from flyconfigs.registry import refresh

    monkeypatch.setitem(sys.modules, "platformdirs", None)
    monkeypatch.delenv("FLYCONFIGS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("FLYCONFIGS_NO_GPU_DETECT", raising=False)
    refresh()
    try:
        main(["doctor"])
    finally:
        monkeypatch.setenv("FLYCONFIGS_NO_GPU_DETECT", "1")
        refresh()
    captured = capsys.readouterr()
    device = next(line for line in captured.out.splitlines() if line.startswith("device: "))
    assert "platformdirs" not in captured.out + captured.err and "ModuleNotFoundError" not in device, device


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_")}
    return subprocess.run([sys.executable, "-m", "flyconfigs", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**base, "FLYCONFIGS_NO_GPU_DETECT": "1", **env})


def test_explain_writes_null_and_false_as_they_are_typed() -> None:
    done = _cli("explain", "vllm_fused_moe", "E=8", "N=14336", "dtype=null", "block_n=null", "block_k=null", "down=false",
                "M=60", "--device", "MI300X", FLYCONFIGS_PATH=str(ROOT / "artifacts" / "vllm-fused-moe-gfx942"))
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert "(tuned at E=8 N=14336 dtype=null block_n=null block_k=null down=false M=64)" in last, last
    assert "None" not in done.stdout and "False" not in done.stdout


def test_explain_refuses_a_flyconfigs_device_that_names_no_device_once() -> None:
    done = _cli("explain", "rmsnorm", "M=64", "N=4096", "dtype=bf16", FLYCONFIGS_DEVICE="banana")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.count("AMD Instinct MI300X") == 1, done.stderr
    assert done.stderr.startswith("flyconfigs: error: FLYCONFIGS_DEVICE='banana' is not a device: arch: unknown arch")
    # --device decides the device: the variable is not read then.
    assert _cli("explain", "rmsnorm", "M=64", "N=4096", "dtype=bf16", "--device", "H100",
                FLYCONFIGS_DEVICE="banana").returncode == 0


def test_validate_says_each_problem_once(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"kernel": "rmsnorm')
    done = _cli("validate", str(tmp_path))
    assert done.returncode == 1
    said = done.stdout + done.stderr
    assert said.count("bad.json") == 1, said
    assert "invalid JSON: Unterminated string starting at line 1 column 12" in said, said
