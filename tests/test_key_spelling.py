"""Keys as vLLM's and aiter's users spell them: vLLM's config file names (``device_name``,
``block_shape=[n,k]``, ``_down``) and aiter's CSV columns (``cu_num`` from the device,
``gfx``) give the same answer as the project's own spelling, with what was filled in shown;
a key that cannot be read names the axis, what it takes and an example."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from flyconfigs.cli import main
from flyconfigs.errors import InvalidKeyError
from flyconfigs.registry import default_resolver
from flyconfigs.registry.families.keys import parse_spelled_items, split_spelled_items
from flyconfigs.registry.resolve import Resolver

ROOT = Path(__file__).resolve().parents[1]
VLLM_SM90 = ROOT / "artifacts" / "vllm-fused-moe-sm90"
AITER_GFX942 = ROOT / "imported" / "aiter-gfx942"
H100 = "NVIDIA H100 80GB HBM3"

# (vLLM's spelling, the project's spelling less M, the device the file name names, what is filled in)
VLLM_KEYS = [
    (["E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8"],
     ["E=8", "N=14336", "dtype=fp8_w8a8", "block_n=null", "block_k=null", "down=false"], H100,
     {"block_n": None, "block_k": None, "down": False}),
    (["E=8,N=14336,device_name=NVIDIA_H200"],
     ["E=8", "N=14336", "dtype=null", "block_n=null", "block_k=null", "down=false"], "NVIDIA H200",
     {"dtype": None, "block_n": None, "block_k": None, "down": False}),
    (["E=256,N=128,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128].json"],
     ["E=256", "N=128", "dtype=fp8_w8a8", "block_n=128", "block_k=128", "down=false"], H100, {"down": False}),
    (["E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128]_down.json"],
     ["E=256", "N=256", "dtype=fp8_w8a8", "block_n=128", "block_k=128", "down=true"], "NVIDIA H200", {}),
    (["E=256", "N=512", "device_name=NVIDIA_H200", "dtype=fp8_w8a8", "block_shape=[128,128]", "down=true"],
     ["E=256", "N=512", "dtype=fp8_w8a8", "block_n=128", "block_k=128", "down=true"], "NVIDIA H200", {}),
]


def test_a_file_name_is_split_into_its_items() -> None:
    assert split_spelled_items(["E=8,N=14336,device_name=X,dtype=fp8_w8a8,block_shape=[128,128]_down.json", "M=7"]) \
        == ["E=8", "N=14336", "device_name=X", "dtype=fp8_w8a8", "block_shape=[128,128]", "down=true", "M=7"]
    assert parse_spelled_items(['x={"a":1,"b":[1,2]},y="p,q"']) == {"x": {"a": 1, "b": [1, 2]}, "y": "p,q"}
    assert parse_spelled_items(["M=4096", "dtype=bf16"]) == {"M": 4096, "dtype": "bf16"}


def _explain(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    capsys.readouterr()
    assert main(["explain", *argv, "--json"]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


@pytest.fixture
def vllm_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FLYCONFIGS_PATH", str(VLLM_SM90))
    default_resolver().refresh()
    yield
    monkeypatch.delenv("FLYCONFIGS_PATH")
    default_resolver().refresh()


@pytest.mark.parametrize(("spelled", "project", "device", "filled"), VLLM_KEYS)
@pytest.mark.parametrize("m", [1, 77, 5000])
def test_explain_in_vllms_spelling_answers_as_the_projects(
        vllm_path: None, capsys: pytest.CaptureFixture[str], spelled: list[str], project: list[str], device: str,
        filled: dict[str, object], m: int) -> None:
    theirs = _explain(capsys, "vllm_fused_moe", *spelled, f"M={m}")
    ours = _explain(capsys, "vllm_fused_moe", *project, f"M={m}", "--device", device)
    a, b = theirs["resolution"], ours["resolution"]
    assert isinstance(a, dict) and isinstance(b, dict)
    assert a["source"] == "override" and a["key_match"] in ("exact", "nearest")
    for field in ("config", "key", "matched_key", "file", "device", "source", "key_match", "layer"):
        assert a[field] == b[field], field
    assert a["filled_in"] == filled and b["filled_in"] == {}


def test_down_at_the_end_of_the_dtype_is_the_down_projection() -> None:
    from flyconfigs.kernels.vllm_fused_moe import SPEC

    spelled = SPEC.spelled_key(parse_spelled_items(["E=8,N=1,device_name=NVIDIA_H200,dtype=fp8_w8a8_down.json",
                                                    "M=1"]), None)
    assert spelled.key == {"E": 8, "N": 1, "dtype": "fp8_w8a8", "down": True, "M": 1, "block_n": None, "block_k": None}
    assert spelled.device == "NVIDIA H200" and spelled.filled == {"block_n": None, "block_k": None}


def test_resolve_reads_vllms_spelling_and_records_what_it_filled_in() -> None:
    resolver = Resolver(paths=[str(VLLM_SM90)], detector=None, packages=False)
    theirs = resolver.resolve("vllm_fused_moe", {"E": 8, "N": 14336, "device_name": "NVIDIA_H100_80GB_HBM3",
                                                 "dtype": "fp8_w8a8", "M": 77})
    ours = resolver.resolve("vllm_fused_moe", {"E": 8, "N": 14336, "dtype": "fp8_w8a8", "block_n": None,
                                               "block_k": None, "down": False, "M": 77}, device=H100)
    assert theirs.config == ours.config and theirs.file == ours.file and theirs.source == "override"
    assert dict(theirs.filled_in) == {"block_n": None, "block_k": None, "down": False}
    assert dict(ours.filled_in) == {}


@pytest.mark.parametrize(
    ("items", "needles"),
    [
        (["E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8"], ["'M'", "is missing", "e.g. E=8,N=14336"]),
        (["E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3,block_shape=[128]", "M=1"],
         ["'block_shape'", "[n,k]", "e.g. block_shape=[128,128]"]),
        (["E=8,N=14336,device_name=Some_GPU", "M=1"], ["'device_name'", "names no GPU", "e.g. E=8"]),
        (["E=8,N=14336,device_name=NVIDIA_H200", "M=1", "--device", H100],
         ["'device_name'", "not the device asked for", "e.g. E=8"]),
        (["E=8,N=14336,shape=3", "M=1", "--device", H100], ["'shape'", "device_name, block_shape", "e.g. E=8"]),
    ],
)
def test_a_vllm_key_that_cannot_be_read_names_the_axis_what_it_takes_and_an_example(
        vllm_path: None, capsys: pytest.CaptureFixture[str], items: list[str], needles: list[str]) -> None:
    assert main(["explain", "vllm_fused_moe", *items]) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err


@pytest.fixture
def aiter_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FLYCONFIGS_PATH", str(AITER_GFX942))
    default_resolver().refresh()
    yield
    monkeypatch.delenv("FLYCONFIGS_PATH")
    default_resolver().refresh()


def test_aiter_columns_take_cu_num_from_the_device(aiter_path: None, capsys: pytest.CaptureFixture[str]) -> None:
    shape = ["M=64", "N=1536", "K=5120", "q_dtype_w=torch.int8"]
    theirs = _explain(capsys, "aiter_gemm_a8w8_bpreshuffle", "gfx=gfx942", *shape, "--device", "MI300X")
    ours = _explain(capsys, "aiter_gemm_a8w8_bpreshuffle", "cu_num=304", *shape, "--device", "MI300X")
    a, b = theirs["resolution"], ours["resolution"]
    assert isinstance(a, dict) and isinstance(b, dict)
    assert a["config"] == b["config"] and a["file"] == b["file"] and a["key_match"] == "exact"
    assert a["filled_in"] == {"cu_num": 304} and b["filled_in"] == {}
    steps = theirs["steps"]
    assert isinstance(steps, list) and any("filled in cu_num=304" in s["outcome"] for s in steps)


def test_aiter_moe_fills_in_flydsl_fallback_and_reads_csv_bools() -> None:
    from flyconfigs.kernels.aiter_gemm import BF16, FMOE
    from flyconfigs.registry.sources.device import DeviceQuery

    mi300x = DeviceQuery("amd", "gfx942", "AMD Instinct MI300X", 304)
    key = {"token": 1, "model_dim": 1, "inter_dim": 1, "expert": 1, "topk": 1, "act_type": "a", "dtype": "d",
           "q_dtype_a": "a", "q_dtype_w": "w", "q_type": "q", "use_g1u1": 1, "doweight_stage1": 0}
    spelled = FMOE.spelled_key(key, mi300x)
    assert spelled.filled == {"cu_num": 304, "flydsl_fallback": False}
    bf16 = BF16.spelled_key({"M": 1, "N": 1, "K": 1, "bias": "False", "dtype": "torch.bfloat16",
                             "outdtype": "torch.bfloat16", "scaleAB": "True", "bpreshuffle": "False"}, mi300x)
    assert BF16.check_key(bf16.key)["scaleAB"] is True


@pytest.mark.parametrize(
    ("items", "needles"),
    [
        (["M=64", "N=1536", "K=5120", "q_dtype_w=torch.int8"], ["'cu_num'", "--device MI300X", "e.g. cu_num=304"]),
        (["M=64", "N=1536", "q_dtype_w=torch.int8", "--device", "MI300X"], ["'K'", "an int", "e.g. cu_num=304 M="]),
        (["M=64", "N=1536", "K=1", "q_dtype_w=torch.int8", "kernelId=3", "--device", "MI300X"],
         ["'kernelId'", "key columns: gfx, cu_num, M", "e.g."]),
        (["gfx=gfx950", "M=64", "N=1536", "K=1", "q_dtype_w=torch.int8", "--device", "MI300X"],
         ["'gfx'", "not the device's arch", "e.g."]),
    ],
)
def test_an_aiter_key_that_cannot_be_read_names_the_axis_what_it_takes_and_an_example(
        aiter_path: None, capsys: pytest.CaptureFixture[str], items: list[str], needles: list[str]) -> None:
    assert main(["explain", "aiter_gemm_a8w8_bpreshuffle", *items]) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err


def test_a_spelling_the_family_refuses_is_an_invalid_key() -> None:
    resolver = Resolver(paths=[str(VLLM_SM90)], detector=None, packages=False)
    with pytest.raises(InvalidKeyError, match="block_shape"):
        resolver.resolve("vllm_fused_moe", {"E": 8, "N": 1, "block_shape": [0, 1], "M": 1}, device=H100)
