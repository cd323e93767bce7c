"""The documents a newcomer reads first say what the code does: the README's test command
is the one CI runs, the README stays short, and docs/ repeats no rule in other words."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _indented_commands(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.startswith("    bash ")]


def test_the_readme_gives_exactly_two_commands_and_the_second_is_the_one_ci_runs() -> None:
    section = README.split("## Two commands for a fresh machine", 1)[1].split("\n## ", 1)[0]
    assert _indented_commands(section) == ["bash ./scripts/demo.sh", "bash ./scripts/test.sh"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^bash \./scripts/test\.sh$", ci, re.M), ".ci/run runs the README's test command"


def test_the_readme_stays_short() -> None:
    assert len(README.splitlines()) <= 250


def test_bench_results_keep_exactly_the_figures_of_record() -> None:
    """Every file in bench/results is named in docs/benchmarks.md, and every result file
    the page cites by path is there: the folder holds the records, not a log."""
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    results = ROOT / "bench" / "results"
    kept = {p.name for p in results.iterdir()}
    assert kept, "bench/results holds the figures of record"
    assert {name for name in kept if name not in page} == set()
    cited = set(re.findall(r"bench/results/([A-Za-z0-9_.-]+\.(?:json|md|png))", page))
    assert cited - kept == set()
