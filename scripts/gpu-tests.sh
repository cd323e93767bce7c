#!/usr/bin/env bash
# Runs the GPU tests (tests/gpu) the way users run the library, on a machine with a GPU,
# torch and cuda-bindings (or hip-python): first with flyconfigs alone, then with the
# official data packages installed beside it, each built from artifacts/<target>/ at its
# VERSION by `flyconfigs publish`, as a release is.  Works offline: nothing is fetched;
# packages the machine lacks (pydantic, platformdirs, ...) come as wheels in .whl/.
#
# Usage: scripts/gpu-tests.sh [--with-packages-only] [LOG_DIR [PYTEST_ARGS...]]
#        (LOG_DIR default build/gpu-tests: one log per run, and the `flyconfigs list` and
#        `doctor` output of the second; PYTEST_ARGS default tests/gpu;
#        --with-packages-only skips the first run)
# Exit status: 0 when every run passes.
set -uo pipefail
cd "$(dirname "$0")/.."
both=1
if [ "${1:-}" = "--with-packages-only" ]; then both=0; shift; fi
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

without=skipped
if [ "$both" -eq 1 ]; then
  python3 -m pytest "$@" -q -rs -p no:cacheprovider 2>&1 | tee "$logs/without-packages.log"
  without=${PIPESTATUS[0]}
fi

dist=$(mktemp -d)
for folder in artifacts/*/; do
  target=$(basename "$folder")
  python3 -m flyconfigs publish "$folder" --target "$target" --version "$(cat "$folder/VERSION")" --out "$dist" \
    || exit 2
done
pip_install "$dist"/*.whl || exit 2
python3 -m flyconfigs list > "$logs/packages.txt" 2>&1
python3 -m flyconfigs doctor > "$logs/doctor.txt" 2>&1
python3 -m pytest "$@" -q -rs -p no:cacheprovider 2>&1 | tee "$logs/with-packages.log"
with=${PIPESTATUS[0]}

echo "tests/gpu without the data packages: exit $without; with them: exit $with" | tee "$logs/summary.txt"
{ [ "$without" = skipped ] || [ "$without" -eq 0 ]; } && [ "$with" -eq 0 ]
