#!/usr/bin/env bash
# Runs the GPU tests (tests/gpu) the way users run the library, on a machine with a GPU,
# torch and cuda-bindings (or hip-python): first with flyconfigs alone, then with the
# data packages installed beside it, built by `flyconfigs publish artifacts --all` (every
# artifacts/*/ folder at its VERSION, TARGET and NAME), as a release is.  Works offline: nothing is fetched;
# packages the machine lacks (pydantic, platformdirs, ...) come as wheels in .whl/.
#
# Usage: scripts/gpu-tests.sh [--with-packages-only | --without-packages-only] [LOG_DIR [PYTEST_ARGS...]]
#        (LOG_DIR default build/gpu-tests: one log per run, and the `flyconfigs list` and
#        `doctor` output of the second; PYTEST_ARGS default tests/gpu; each --*-only
#        runs one of the two, so that each fits a call of a few minutes)
# Exit status: 0 when every run passes.
set -uo pipefail
cd "$(dirname "$0")/.."
without_run=1 with_run=1
case "${1:-}" in
  --with-packages-only) without_run=0; shift ;;
  --without-packages-only) with_run=0; shift ;;
esac
logs=${1:-build/gpu-tests}
shift || true
[ $# -gt 0 ] || set -- tests/gpu
site=$(mktemp -d)
mkdir -p "$logs"
export PYTHONPATH=$site FLYCONFIGS_CACHE_DIR=$site/.compile-cache PYTHONUNBUFFERED=1
pip_install() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$@"; }
if compgen -G ".whl/*.whl" >/dev/null; then pip_install .whl/*.whl || exit 2; fi
pip_install --no-build-isolation . || exit 2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$logs/device.txt" 2>&1 || true

without=skipped with=skipped
if [ "$without_run" -eq 1 ]; then
  python3 -m pytest "$@" -q -rs -p no:cacheprovider 2>&1 | tee "$logs/without-packages.log"
  without=${PIPESTATUS[0]}
fi

if [ "$with_run" -eq 1 ]; then
  dist=$(mktemp -d)
  # Every folder of artifacts/ at its VERSION (TARGET and NAME too), as a release is built.
  python3 -m flyconfigs publish artifacts --all --out "$dist" > "$logs/publish.txt" 2>&1 || { cat "$logs/publish.txt"; exit 2; }
  pip_install "$dist"/*.whl || exit 2
  python3 -m flyconfigs list > "$logs/packages.txt" 2>&1
  python3 -m flyconfigs doctor > "$logs/doctor.txt" 2>&1
  python3 -m pytest "$@" -q -rs -p no:cacheprovider 2>&1 | tee "$logs/with-packages.log"
  with=${PIPESTATUS[0]}
fi

echo "tests/gpu without the data packages: exit $without; with them: exit $with" | tee "$logs/summary.txt"
{ [ "$without" = skipped ] || [ "$without" -eq 0 ]; } && { [ "$with" = skipped ] || [ "$with" -eq 0 ]; }
