"""End to end with real parts: real vLLM config files (an MI300X's and an H200's) and a
real aiter tuned CSV are imported, validated and published (``flyconfigs publish``) as
``flyconfigs-gfx942`` and ``flyconfigs-sm90`` to a real pypiserver on loopback, which
serves them with the flyconfigs wheel; pip installs them into a fresh virtual environment,
and there ``flyconfigs.resolve`` finds them through entry points (the packages' and the
kernels' declarations alike) and serves each file's config for its key and device."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flyconfigs.cli import main

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from local_index import LocalIndex, build_core_wheel, dependency_wheels, fresh_venv  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[1]
UPSTREAM = Path(__file__).parent / "data" / "upstream"
MI300X_FILE = UPSTREAM / "vllm" / "E=128,N=384,device_name=AMD_Instinct_MI300X.json"
H200_FILE = UPSTREAM / "vllm" / "E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
AITER_FILE = UPSTREAM / "aiter" / "a8w8_bpreshuffle_tuned_gemm.csv"

RESOLVE = textwrap.dedent('''
    import json, sys, flyconfigs
    out = []
    for kernel, key, device in json.loads(sys.argv[1]):
        r = flyconfigs.resolve(kernel, key, device=device)
        out.append({"config": dict(r.config), "source": r.source, "origin": r.origin, "selection": r.selection,
                    "key_match": r.key_match})
    print(json.dumps(out))
''')


def test_upstream_files_are_imported_published_installed_and_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    imported = tmp_path / "imported"
    assert main(["import", "vllm", str(MI300X_FILE), str(H200_FILE), "--out", str(imported)]) == 0
    assert main(["import", "aiter", str(AITER_FILE), "--out", str(imported)]) == 0
    for target in ("gfx942", "sm90"):
        assert main(["validate", str(imported / target)]) == 0

    index_dir = tmp_path / "index"
    index_dir.mkdir()
    dependency_wheels(index_dir)
    build_core_wheel(ROOT, index_dir)
    monkeypatch.setenv("TWINE_USERNAME", "test")
    monkeypatch.setenv("TWINE_PASSWORD", "test")
    with LocalIndex(index_dir) as index:
        for target in ("gfx942", "sm90"):
            assert main(["publish", str(imported / target), "--target", target, "--version", "1.0.0",
                         "--out", str(tmp_path / "dist"), "--upload", index.url]) == 0
        python = fresh_venv(tmp_path / "venv")
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--index-url", index.simple,
                        "flyconfigs-gfx942", "flyconfigs-sm90"], check=True, capture_output=True)

    moe = {"E": 128, "N": 384, "down": False}
    with AITER_FILE.open(newline="") as handle:
        aiter_row = next(r for r in csv.DictReader(handle) if (r["gfx"], r["cu_num"]) == ("gfx942", "304"))
    asks = [
        ("vllm_fused_moe", {**moe, "dtype": "fp8_w8a8", "block_n": 128, "block_k": 128, "M": 64},
         "sm90:132:NVIDIA H200"),
        ("vllm_fused_moe", {**moe, "dtype": None, "block_n": None, "block_k": None, "M": 1024},
         "gfx942:304:AMD Instinct MI300X"),
        ("vllm_fused_moe", {**moe, "dtype": None, "block_n": None, "block_k": None, "M": 1000},
         "gfx942:304:AMD Instinct MI300X"),
        ("aiter_gemm_a8w8_bpreshuffle", {"cu_num": 304, "M": int(aiter_row["M"]), "N": int(aiter_row["N"]),
                                         "K": int(aiter_row["K"]), "q_dtype_w": aiter_row["q_dtype_w"]},
         "gfx942:304:AMD Instinct MI325X"),
        ("vllm_fused_moe", {**moe, "dtype": "fp8_w8a8", "block_n": 128, "block_k": 128, "M": 64},
         "gfx942:304:AMD Instinct MI300X"),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_") and k != "PYTHONPATH"}
    env["FLYCONFIGS_NO_GPU_DETECT"] = "1"
    done = subprocess.run([str(python), "-c", RESOLVE, json.dumps(asks)], capture_output=True, text=True, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    h200, mi300x, nearby, aiter, elsewhere = json.loads(done.stdout)

    assert (h200["source"], h200["origin"], h200["selection"]) == ("package", "flyconfigs-sm90", "imported")
    assert h200["config"] == json.loads(H200_FILE.read_text())["64"]
    assert (mi300x["origin"], mi300x["config"]) == ("flyconfigs-gfx942", json.loads(MI300X_FILE.read_text())["1024"])
    assert (nearby["key_match"], nearby["config"]) == ("nearest", mi300x["config"])
    assert (aiter["source"], aiter["origin"]) == ("package", "flyconfigs-gfx942")
    assert aiter["config"] == {"libtype": aiter_row["libtype"], "kernelId": int(aiter_row["kernelId"]),
                               "splitK": int(aiter_row["splitK"]), "kernelName": aiter_row["kernelName"]}
    assert (elsewhere["source"], elsewhere["config"]) == ("default", {})
