"""Where the vLLM 0.34.0 corpus lies in this repository, and vLLM's own lookup of it,
restated for the tests (vLLM itself needs torch and a GPU build)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).parents[1] / "corpora" / "vllm-0.34.0"
CONFIGS = CORPUS / "configs"
RELEASE = "v0.34.0"
"""The vLLM release the corpus is (its git tag)."""


def config_files() -> list[Path]:
    """Every JSON config file of the corpus, sorted."""
    return sorted(CONFIGS.glob("*.json"))


def vllm_table(path: Path) -> dict[int, Any]:
    """The file as vLLM 0.34.0's ``get_moe_configs`` returns it: ``triton_version``
    dropped, the members as ints in the file's order (a ``backend=flydsl`` file as
    ``fused_flydsl_moe.try_get_optimal_config`` returns it, which drops nothing)."""
    data = json.loads(path.read_text())
    if "backend=flydsl" not in path.name:
        data.pop("triton_version", None)
    return {int(key): value for key, value in data.items()}


def vllm_pick(table: dict[int, Any], m: int) -> int:
    """The batch size whose entry vLLM serves for ``m``: ``min(configs, key=lambda x:
    abs(x - M))``, whose ties go to the first member in the file's order."""
    return min(table, key=lambda x: abs(x - m))


def probe_sizes(tuned: list[int]) -> list[int]:
    """The batch sizes a test asks for a file: every entry, the midpoints (ties) and
    their neighbours between adjacent entries, 1, and beyond both ends."""
    s = sorted(tuned)
    out = {1, max(1, s[0] - 1), s[-1] + 1, 2 * s[-1], 10**6}
    for a, b in zip(s, s[1:], strict=False):
        mid = (a + b) // 2
        out.update({a, b, mid, mid + 1, max(1, mid - 1)})
    out.update(s)
    return sorted(out)

