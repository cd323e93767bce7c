"""Small edges of the importers and keys: a trailing newline is no part of a name (a key
value, a vLLM file name or batch size), and a vLLM file with no batch size is refused,
not imported silently as nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flyconfigs.adapters.vllm import import_vllm_file, parse_file_name
from flyconfigs.cli import main
from flyconfigs.errors import ArtifactError, InvalidKeyError
from flyconfigs.registry import kernel_declaration

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
NAME = "E=8,N=7168,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"


AITER_KEY = {"cu_num": 80, "M": 1, "N": 1280, "K": 8192, "q_dtype_w": "torch.int8"}


@given(st.sampled_from(["\n", "\r\n", "\n\n"]))
def test_a_key_name_with_a_trailing_newline_is_refused(tail: str) -> None:
    decl = kernel_declaration("aiter_gemm_a8w8")  # q_dtype_w: a name of no fixed choices
    decl.check_key(AITER_KEY)
    with pytest.raises(InvalidKeyError, match="q_dtype_w"):
        decl.check_key({**AITER_KEY, "q_dtype_w": "torch.int8" + tail})


def test_a_vllm_file_name_or_batch_size_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError):
        parse_file_name(NAME + "\n")
    path = tmp_path / NAME
    path.write_text(json.dumps({"64\n": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128,
                                         "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}}))
    result = import_vllm_file(path)
    assert result.artifacts == [] and [p.field for e in result.refused for p in e.problems] == ["64\n"]


@pytest.mark.parametrize("content", [{}, {"triton_version": "3.2.0"}])
def test_a_vllm_file_with_no_batch_size_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   content: dict[str, str]) -> None:
    path = tmp_path / NAME
    path.write_text(json.dumps(content))
    assert main(["import", "vllm", str(path), "--out", str(tmp_path / "out")]) == 1
    assert "no batch size in the file" in capsys.readouterr().err
