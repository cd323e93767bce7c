#!/usr/bin/env bash
# The next flyconfigs-sm90 release, on one sm90 GPU (an H100 or H200), in steps that each
# end within a time budget (default 450 s, FLYCONFIGS_STEP_BUDGET_S), so that each fits a
# call of a GPU machine lent for ten minutes at most and taken back at any time.  Every step
# leaves its results under OUT and a mark OUT/steps/<step>.done when it has finished; a
# step already marked is skipped, and a step cut short (its budget ran out, the machine was
# taken back) is run again from where its files stand: the tunes resume (--resume) and keep
# each key written, a benchmark starts over.  Carry OUT from one call to the next.
#
# Usage: bench/release_step.sh OUT STEP [QUACK_SITE]
#   STEP: one of the steps below, `next` (the first not done), `status` (what is done)
#   QUACK_SITE: the folder quack's wheels were installed into with pip --target; without
#   it quack is left out of the peer benchmarks, and their results say so.
# Exit status: 0 the step is done (or was), 3 its budget ran out (run it again), 4 every
#   step is done (`next`), 2 bad arguments, else the step's own failure.
#
# Under OUT: tuned/<set>/ (artifacts to copy into artifacts/sm90 with a new VERSION and
# CHANGELOG entry), one result file per benchmark step, logs/<step>.log, steps/<step>.done.
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=(gpu-tests-fused tune-rmsnorm-models tune-fused-models tune-rmsnorm-offgrid tune-fused-offgrid
       launch-overhead off-grid-rmsnorm off-grid-fused bench-fused-perf bench-fused-offgrid
       bench-rmsnorm-perf bench-rmsnorm-models bench-rmsnorm-offgrid)
[ $# -ge 2 ] || { sed -n 2,20p "$0" >&2; exit 2; }
out=$(realpath -m "$1"); step=$2; quack=${3:+--quack-site $3}
budget=${FLYCONFIGS_STEP_BUDGET_S:-450}
tuned=$out/tuned
mkdir -p "$out/steps" "$out/logs" "$tuned"
export PYTHONUNBUFFERED=1

if [ "$step" = status ]; then
  for s in "${STEPS[@]}"; do
    if [ -e "$out/steps/$s.done" ]; then echo "done     $s"; else echo "not done $s"; fi
  done
  exit 0
fi
if [ "$step" = next ]; then
  step=
  for s in "${STEPS[@]}"; do [ -e "$out/steps/$s.done" ] || { step=$s; break; }; done
  [ -n "$step" ] || { echo "every step is done: $out"; exit 4; }
fi
known=0
for s in "${STEPS[@]}"; do [ "$s" = "$step" ] && known=1; done
[ "$known" -eq 1 ] || { echo "unknown step '$step'; steps: ${STEPS[*]}, next, status" >&2; exit 2; }
if [ -e "$out/steps/$step.done" ]; then echo "$step: done already"; exit 0; fi

# Off-grid keys: row lengths and counts that no preset of either family names.
rms_off=(--key-grid "M=3,700,9000 N=1408,4480,11008 dtype=bf16" --key-grid "M=48,2500,30000 N=2816,9216,14336 dtype=bf16"
         --key-grid "M=8192,10000 N=10240,11008 dtype=bf16" --key-grid "M=200,5000 N=1408,6400 dtype=fp16")
fused_off=(--key-grid "M=3,700,9000 N=2816,6400 dtype=bf16" --key-grid "M=48,30000 N=4480,9216 dtype=bf16"
           --key-grid "M=200 N=11008 dtype=fp16")
# Served as a user of the next release is: the new tunings first, then the package's folder.
served=$tuned/rmsnorm-models:$tuned/fused-models:$PWD/artifacts/sm90

run() {  # the step's command, within the budget; interrupted (SIGINT) when it runs out
  timeout -s INT -k 30 "$budget" "$@"
}
case $step in
  gpu-tests-fused)
    run python3 -m pytest tests/gpu/test_fused_add_rmsnorm_gpu.py -q -rs -p no:cacheprovider
    ;;
  tune-rmsnorm-models) run python3 -m flyconfigs tune rmsnorm --key-grid models --resume --out "$tuned/rmsnorm-models" ;;
  tune-fused-models) run python3 -m flyconfigs tune fused_add_rmsnorm --key-grid models --resume --out "$tuned/fused-models" ;;
  tune-rmsnorm-offgrid) run python3 -m flyconfigs tune rmsnorm "${rms_off[@]}" --resume --out "$tuned/rmsnorm-offgrid" ;;
  tune-fused-offgrid) run python3 -m flyconfigs tune fused_add_rmsnorm "${fused_off[@]}" --resume --out "$tuned/fused-offgrid" ;;
  launch-overhead) FLYCONFIGS_PATH=$served run python3 -m bench.launch_overhead --out "$out/launch-overhead.json" ;;
  off-grid-rmsnorm)
    FLYCONFIGS_PATH=$served run python3 -m bench.off_grid rmsnorm --tuned "$tuned/rmsnorm-offgrid" --out "$out/off-grid-rmsnorm.json" ;;
  off-grid-fused)
    FLYCONFIGS_PATH=$served run python3 -m bench.off_grid fused_add_rmsnorm --tuned "$tuned/fused-offgrid" \
      --out "$out/off-grid-fused.json" ;;
  # shellcheck disable=SC2086  # $quack is two words or none
  bench-fused-perf) FLYCONFIGS_PATH=$served run python3 -m bench.fused_add_rmsnorm --grid perf --samples 10 $quack \
      --out "$out/fused-perf.json" ;;
  # shellcheck disable=SC2086
  bench-fused-offgrid) FLYCONFIGS_PATH=$served run python3 -m bench.fused_add_rmsnorm "${fused_off[@]/--key-grid/--grid}" \
      --samples 10 $quack --out "$out/fused-offgrid.json" ;;
  # shellcheck disable=SC2086
  bench-rmsnorm-perf) FLYCONFIGS_PATH=$served run python3 -m bench.rmsnorm --grid perf --samples 10 $quack \
      --out "$out/rmsnorm-perf.json" ;;
  # shellcheck disable=SC2086
  bench-rmsnorm-models) FLYCONFIGS_PATH=$served run python3 -m bench.rmsnorm --grid models --samples 10 $quack \
      --out "$out/rmsnorm-models.json" ;;
  # shellcheck disable=SC2086
  bench-rmsnorm-offgrid) FLYCONFIGS_PATH=$served run python3 -m bench.rmsnorm "${rms_off[@]/--key-grid/--grid}" \
      --samples 10 $quack --out "$out/rmsnorm-offgrid.json" ;;
esac > "$out/logs/$step.log" 2>&1
rc=$?
tail -n 5 "$out/logs/$step.log"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || [ "$rc" -eq 130 ]; then
  echo "$step: its $budget s ran out; run it again to go on"; exit 3
fi
if [ "$step" = gpu-tests-fused ] && [ "$rc" -ne 0 ]; then
  echo "$step: failed (exit $rc; see logs/$step.log); the release goes on"; rc=0
fi
[ "$rc" -eq 0 ] || { echo "$step: failed (exit $rc; see logs/$step.log)"; exit "$rc"; }
touch "$out/steps/$step.done"
echo "$step: done"
