#!/usr/bin/env bash
# Sets up .venv and runs the main job on the embedded default (see scripts/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[publish]' 'pypiserver>=2.1'
.venv/bin/python scripts/demo.py "$@"
