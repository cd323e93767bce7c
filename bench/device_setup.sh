#!/usr/bin/env bash
# On an offline GPU machine: install the wheels in .whl/ and this checkout into
# /tmp/site, with no index (the machine reaches none).  Source it: it exports PYTHONPATH.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade --target /tmp/site .
export PYTHONPATH=/tmp/site
export FLYCONFIGS_CACHE_DIR=/tmp/flyconfigs-cache
set +e
