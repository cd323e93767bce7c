#!/usr/bin/env bash
# Sets up .venv with everything the tests need (the compile-only ROCm prefix for the
# gfx942 hipRTC tests and the real flydsl package for the FlyDSL interop tests included)
# and runs the test suite, one pytest process per core (at most 4).  "No tests collected"
# fails.
#
# It runs every test but the slow ones (marker `slow`: they build and pip-install
# distributions into fresh virtual environments, serve a local package index, start Ray
# clusters, or run the longest compile sweeps, refits and thread races), which take as
# long again; `scripts/test.sh --slow` runs those alone, and CI (.ci/run) runs both.
# Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
selection=(-m "not slow")
if [ "${1:-}" = "--slow" ]; then
  shift
  selection=(-m slow)
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# --no-compile: byte-compiling all of torch and Ray at install takes longer than compiling
# the modules the tests import when they first import them.  That needs Python to keep what
# it compiles: with PYTHONDONTWRITEBYTECODE set, every test process, subprocess and Ray
# worker would compile torch and Ray from source again.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m pip install -q --no-compile -e '.[dev,hip]' 'torch==2.13.0'
# NVRTC and the CUDA headers as wheels: the sm90 compile tests need no GPU and no toolkit.
.venv/bin/python -m pip install -q --no-compile 'cuda-bindings>=13,<14' 'cuda-pathfinder>=1.0' 'nvidia-cuda-nvrtc>=13,<14' 'nvidia-cuda-runtime>=13,<14'
# Triton (a CPU-only machine installs the same wheel) for the Triton helpers' tests, which
# run its interpreter on CPU tensors.
.venv/bin/python -m pip install -q --no-compile 'triton>=3.2' 'numpy>=1.26'
# Kernel Tuner for its T4 results schema only (the T4 tests compare our copy with the
# installed package's file; nothing imports it, so none of its dependencies is needed).
.venv/bin/python -m pip install -q --no-compile --no-deps 'kernel_tuner==1.5.0'
.venv/bin/python -m pip install -q --no-compile 'flydsl==0.5.0' || echo "test.sh: flydsl 0.5.0 could not be installed; the FlyDSL interop tests will skip" >&2
bash scripts/rocm-prefix.sh || echo "test.sh: the ROCm compile-only prefix could not be built; the hipRTC tests will skip" >&2
# The big packages every test process imports are compiled once, in one process, not in
# every pytest worker at the same time.
.venv/bin/python -c "import torch, triton, triton.runtime.interpreter, ray, ray.cluster_utils, hypothesis, pydantic, flyconfigs.cli"
set +e
.venv/bin/python -m pytest -n auto --maxprocesses 4 --dist loadfile "${selection[@]}" "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "test.sh: no tests were collected" >&2
  exit 1
fi
exit "$status"
