"""The loader's costs, measured with pyperf (calibrated loops in several worker
processes, warm-ups discarded, one value per run):

- ``import flyconfigs`` in a fresh interpreter, and ``import flyconfigs`` plus the first
  ``resolve`` of a key the memo does not hold (one installed data package of 50
  artifacts), each minus a bare interpreter's start measured in the same run;
- ``loads_artifact`` of a typical artifact (64 candidates, compact canonical JSON) on one
  core, as artifacts per second.

    python -m bench.loader_pyperf [--out bench/results/loader-pyperf.json] [pyperf options, e.g. --fast]

Without ``--out`` nothing is written; committed results are replaced only on purpose.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import pyperf

from bench.common import compile_bytecode, machine
from flyconfigs.schema import loads_artifact
from tests.distributions import install_data_package
from tests.factories import make_artifact

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}
FIRST_RESOLVE = (
    "import flyconfigs; r = flyconfigs.resolve('rmsnorm', {'M': 4096, 'N': 8192, 'dtype': 'bf16', "
    "'weight_dtype': 'bf16'}, 'sm90:132:NVIDIA H200'); assert r.source == 'package', r"
)


def _site() -> Path:
    """A folder holding one real data package of 50 artifacts (made once per run)."""
    root = Path(os.environ.setdefault("FLYCONFIGS_BENCH_SITE", tempfile.mkdtemp(prefix="flyconfigs-bench-")))
    if not any(root.glob("*.dist-info")):
        install_data_package(root, "sm90", [make_artifact(key={**KEY, "M": 1 << i}) for i in range(13)]
                             + [make_artifact(key={**KEY, "N": 1024 * (i + 1), "M": 3}) for i in range(37)])
    return root


def _add_cmdline(cmd: list[str], args: object) -> None:
    if getattr(args, "out", None):
        cmd.extend(("--out", args.out))  # type: ignore[attr-defined]


def main() -> None:
    # pyperf starts its workers as "python <program_args> --worker ...": run them as this
    # module too, so that they import bench.common and the tests' fixtures as it does.
    runner = pyperf.Runner(add_cmdline_args=_add_cmdline, program_args=("-m", "bench.loader_pyperf"))
    runner.argparser.add_argument("--out", help="write the summary here (default: print only)")
    args = runner.parse_args()
    site = _site()
    bytecode = compile_bytecode(Path(__file__).resolve().parent.parent)  # as an install leaves the modules
    env = {"PYTHONPATH": str(site), "FLYCONFIGS_NO_GPU_DETECT": "1"}
    os.environ.update(env)
    python = sys.executable
    bare = runner.bench_command("python -c pass", [python, "-c", "pass"])
    imported = runner.bench_command("import flyconfigs", [python, "-c", "import flyconfigs"])
    resolved = runner.bench_command("import flyconfigs + first resolve", [python, "-c", FIRST_RESOLVE])
    raw = make_artifact(n_candidates=64).to_json_bytes()
    loads = runner.bench_func("loads_artifact (64 candidates)", loads_artifact, raw)
    if loads is None or bare is None or imported is None or resolved is None:  # a pyperf worker process
        return
    start = statistics.median(bare.get_values())
    summary = {
        "benchmark": "loader-pyperf",
        "machine": machine(),
        "tool": f"pyperf {pyperf.__version__}",
        "bytecode_compiled": bytecode,
        "load_average_at_end": os.getloadavg(),
        "interpreter_start_ms": start * 1e3,
        "import_flyconfigs_ms": (statistics.median(imported.get_values()) - start) * 1e3,
        "import_and_first_resolve_ms": (statistics.median(resolved.get_values()) - start) * 1e3,
        "loads_artifact_per_second": 1.0 / statistics.median(loads.get_values()),
        "loads_artifact_us": {"median": statistics.median(loads.get_values()) * 1e6,
                              "stdev": statistics.stdev(loads.get_values()) * 1e6},
        "artifact_bytes": len(raw),
        "goals": {"import_flyconfigs_ms": 100, "loads_artifact_per_second": 5000},
    }
    print(json.dumps(summary, indent=2, sort_keys=True))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
