"""The committed vLLM corpus is the release's folder, unedited: every file's digest is
the one the wheel's own RECORD states, and nothing else lies there."""

from __future__ import annotations

import base64
import csv
import hashlib

from tests.vllm_corpus import CONFIGS, CORPUS, config_files

PREFIX = "vllm/model_executor/layers/fused_moe/configs/"


def test_every_file_is_the_wheels_own() -> None:
    with (CORPUS / "RECORD").open(newline="") as f:
        rows = {path.removeprefix(PREFIX): (digest, int(size)) for path, digest, size in csv.reader(f)}
    here = {p.name for p in CONFIGS.iterdir()}
    assert here == set(rows)
    for name, (digest, size) in rows.items():
        data = (CONFIGS / name).read_bytes()
        ours = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (ours, len(data)) == (digest, size), name
    assert len(config_files()) == 340
    assert "Apache License" in (CORPUS / "LICENSE").read_text()
