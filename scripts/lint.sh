#!/usr/bin/env bash
# The structure checks CI enforces on the library: the layers contract (import-linter),
# ruff, and mypy --strict.  Run after scripts/test.sh has set up .venv.
#
# The import tree (flyconfigs.schema from schema/, ...) is assembled by setuptools'
# package-dir mapping; import-linter walks folders and mypy cannot follow an editable
# install's import hook, so both read the package as a wheel installs it, laid out under
# build/lint by pip from this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf build/lint build/lib  # setuptools never deletes a stale file of build/lib
.venv/bin/python -m pip install -q --no-deps --no-build-isolation --no-compile --target build/lint .
(cd build/lint && ../../.venv/bin/lint-imports ../../pyproject.toml)
.venv/bin/ruff check flyconfigs schema registry publish kernels tuner adapters
(cd build/lint && ../../.venv/bin/mypy --config-file ../../pyproject.toml)
