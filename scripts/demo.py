"""The main job on the embedded default: publish the repository's data packages from
artifacts/, serve them from a local index (pypiserver on loopback), install them into a
fresh virtual environment, and resolve and explain RMSNorm and fused add + RMSNorm configs there through
entry-point discovery — the loop a user of a data package meets.

    python scripts/demo.py [--artifacts DIR] [--keep DIR]

Without ``--keep`` everything it makes (some 200 MB) is in a temporary folder removed at
the end, also when a step fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from local_index import LocalIndex, build_core_wheel, dependency_wheels, fresh_venv  # noqa: E402

from flyconfigs.publish.build import publish_all, upload_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEVICES = {
    "sm90": "sm90:132:NVIDIA H200",
    "gfx942": "MI300X",
    "sm80": "A100",
    "sm100": "B200",
    "gfx90a": "MI250X",
    "gfx950": "MI355X",
}
"""The device each package is explained on; sm90 is measured, the others predicted (their
explain says so, and names the cost model)."""
KEYS = [
    ["M=4096", "N=8192", "dtype=bf16", "weight_dtype=bf16"],
    ["M=3000", "N=4096", "dtype=bf16", "weight_dtype=bf16"],
]


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", type=Path, default=ROOT / "artifacts")
    parser.add_argument("--keep", type=Path, help="keep the index and environment in this folder (by default "
                        "they are made in a temporary folder, removed at the end)")
    args = parser.parse_args(argv)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        run(args.artifacts, args.keep)
        print(f"\nwork folder, kept: {args.keep}")
        return
    # The packages, the index and the environment take some 200 MB: gone when the demo ends.
    with tempfile.TemporaryDirectory(prefix="flyconfigs-demo-") as work:
        run(args.artifacts, Path(work))
    print(f"\nwork folder removed: {work}")


def run(artifacts: Path, work: Path) -> None:
    """Publish ``artifacts``, serve, install and explain, all under ``work``."""
    dist = work / "dist"

    step(f"publish every target under {artifacts}")
    results = publish_all(artifacts, dist)
    for r in results:
        print(f"{r.distribution} {r.version}: {r.artifacts} artifacts -> {', '.join(f.name for f in r.files)}")
    core = build_core_wheel(ROOT, dist)

    index_dir = work / "index"
    index_dir.mkdir(exist_ok=True)
    dependency_wheels(index_dir)
    with LocalIndex(index_dir) as index:
        step(f"upload to the local index {index.url} with twine")
        os.environ.setdefault("TWINE_USERNAME", "demo")
        os.environ.setdefault("TWINE_PASSWORD", "demo")
        upload_files([core, *(f for r in results for f in r.files)], index.url)

        step("pip install the data packages into a fresh virtual environment")
        python = fresh_venv(work / "venv")
        names = [r.distribution for r in results]
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--index-url", index.simple, *names], check=True)

    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLYCONFIGS_") and k != "PYTHONPATH"}
    clean["FLYCONFIGS_NO_GPU_DETECT"] = "1"

    def flyconfigs(*cli: str) -> None:
        print(f"$ flyconfigs {' '.join(cli)}", flush=True)
        subprocess.run([str(python), "-m", "flyconfigs", *cli], check=True, env=clean, cwd=work)

    step("discovered through entry points")
    flyconfigs("list")
    for r in results:
        target = r.distribution.removeprefix("flyconfigs-")
        device = DEVICES.get(target)
        if device is None:  # a package of another family's configs (vLLM's, aiter's)
            continue
        for key in KEYS:
            step(f"explain on {device} ({'measured' if target == 'sm90' else 'predicted: compiled, never timed'})")
            flyconfigs("explain", "rmsnorm", *key, "--device", device)
        if target == "sm90":
            other = "sm90:132:NVIDIA H100 80GB HBM3"
            step(f"the same key on {other}: its own tunings, from the same package")
            flyconfigs("explain", "rmsnorm", *KEYS[0], "--device", other)
            step(f"the Triton family on {device}: fused residual add + RMSNorm")
            flyconfigs("explain", "fused_add_rmsnorm", "M=2048", "N=3584", "dtype=bf16", "weight_dtype=bf16",
                       "--device", device)
    step("a device no package serves falls back to the default heuristic")
    flyconfigs("explain", "rmsnorm", *KEYS[0], "--device", "L40S")


if __name__ == "__main__":
    main()
