"""The main job on the embedded default: validate the repository's artifacts and
explain which config an RMSNorm call gets on an H200 and on an MI300X."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = ["M=4096", "N=8192", "dtype=bf16", "weight_dtype=bf16"]


def flyconfigs(*args: str) -> None:
    print("$ flyconfigs " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "flyconfigs", *args], check=True)


def main() -> None:
    flyconfigs("validate", str(ROOT / "artifacts"))
    for device in ("sm90:132:NVIDIA H200", "gfx942:304:AMD Instinct MI300X:sramecc+,xnack-"):
        flyconfigs("explain", "rmsnorm", *KEY, "--device", device)


if __name__ == "__main__":
    main()
