#!/usr/bin/env bash
# The next flyconfigs-sm90 release, run on one sm90 GPU (an H100 or H200) from the
# checkout's root, about 20 minutes: the fused op's GPU tests, the `models` preset of both
# families tuned, keys that no preset names tuned for the off-grid check, then every
# benchmark with every peer in the same process over the new tunings and artifacts/sm90.
# Everything lands under OUT: tuned/<set>/ (artifacts to copy into artifacts/sm90 with a
# new VERSION and CHANGELOG entry) and one result file per benchmark.
#
# Usage: bench/release_run.sh OUT [QUACK_SITE]   (QUACK_SITE: the folder quack's wheels
# were installed into with pip --target; without it quack is left out and the result says so)
set -euo pipefail
out=$(realpath -m "$1"); quack=${2:+--quack-site $2}
tuned=$out/tuned; mkdir -p "$tuned"
export PYTHONUNBUFFERED=1
python3 -m pytest tests/gpu/test_fused_add_rmsnorm_gpu.py -q -rs -p no:cacheprovider > "$out/gpu-tests-fused.log" 2>&1 || true
# Off-grid keys: row lengths and counts that no preset of either family names.
rms_off=(--key-grid "M=3,700,9000 N=1408,4480,11008 dtype=bf16" --key-grid "M=48,2500,30000 N=2816,9216,14336 dtype=bf16"
         --key-grid "M=8192,10000 N=10240,11008 dtype=bf16" --key-grid "M=200,5000 N=1408,6400 dtype=fp16")
fused_off=(--key-grid "M=3,700,9000 N=2816,6400 dtype=bf16" --key-grid "M=48,30000 N=4480,9216 dtype=bf16"
           --key-grid "M=200 N=11008 dtype=fp16")
python3 -m flyconfigs tune rmsnorm --key-grid models --resume --out "$tuned/rmsnorm-models"
python3 -m flyconfigs tune fused_add_rmsnorm --key-grid models --resume --out "$tuned/fused-models"
python3 -m flyconfigs tune rmsnorm "${rms_off[@]}" --resume --out "$tuned/rmsnorm-offgrid"
python3 -m flyconfigs tune fused_add_rmsnorm "${fused_off[@]}" --resume --out "$tuned/fused-offgrid"
# Served as a user of the next release is: the new tunings first, then the package's folder.
export FLYCONFIGS_PATH=$tuned/rmsnorm-models:$tuned/fused-models:$PWD/artifacts/sm90
python3 -m bench.launch_overhead --out "$out/launch-overhead.json"
python3 -m bench.off_grid rmsnorm --tuned "$tuned/rmsnorm-offgrid" --out "$out/off-grid-rmsnorm.json"
python3 -m bench.off_grid fused_add_rmsnorm --tuned "$tuned/fused-offgrid" --out "$out/off-grid-fused.json"
# shellcheck disable=SC2086  # $quack is two words or none
python3 -m bench.fused_add_rmsnorm --grid perf "${fused_off[@]/--key-grid/--grid}" --samples 10 $quack --out "$out/fused.json"
# shellcheck disable=SC2086
python3 -m bench.rmsnorm --grid perf --grid models "${rms_off[@]/--key-grid/--grid}" --samples 10 $quack --out "$out/rmsnorm.json"
