#!/usr/bin/env bash
# The structure checks CI enforces on the library: the layers contract (import-linter),
# ruff, and mypy --strict.  Run after scripts/test.sh has set up .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/lint-imports
.venv/bin/ruff check flyconfigs schema registry kernels tuner
.venv/bin/mypy
