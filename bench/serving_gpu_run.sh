#!/usr/bin/env bash
# The serving rule's GPU checks on one sm90 GPU (an H100: the leave-one-out rows re-timed
# are the H100's), from the checkout's root, in steps of at most 8 minutes that each leave
# a marker under OUT and are skipped once done, so the script can be run again (on a fresh
# machine too) until every step has run:
#   1. RMSNorm's leave-one-out picks (bench/results/neighbour-vote-loo.json) re-timed, each
#      key measured twice, hiding a key, every key of an N, then every key of an M
#      (bench/loo_remeasure.py, --resume: a step stopped by its budget goes on where it stopped);
#   2. the 25 RMSNorm keys no preset names tuned, then served from artifacts/sm90 with each
#      rule beside the default and the tuning (bench/off_grid.py);
#   3. the fused family's every-config GPU test at the shapes where a Triton tail config
#      once gave a wrong row.
# Everything lands under OUT: loo-remeasure-*.json, tuned/, off-grid-new-rmsnorm.json,
# *.log, done.* markers.
#
# Usage: [ONE_STEP=1] bench/serving_gpu_run.sh OUT
# ONE_STEP=1 runs at most one step that is not done yet and exits.
set -uo pipefail
out=$(realpath -m "$1")
tuned=$out/tuned; mkdir -p "$tuned"
export PYTHONUNBUFFERED=1
limit=470  # seconds per step, under the machine's 10 minutes a command
steps=7
new="M=48,420,1800,7000,24000 N=1280,3200,4480,7680,10752 dtype=bf16"
loo=bench/results/neighbour-vote-loo.json

step() {  # step NAME COMMAND...: run unless done; mark done on success
    local name=$1; shift
    if [[ -e $out/done.$name ]]; then echo "skip $name (done)"; return 0; fi
    echo "run $name"
    if timeout "$limit" "$@"; then touch "$out/done.$name"; else echo "$name stopped (rc $?): run the script again"; fi
    if [[ -n ${ONE_STEP:-} ]]; then
        echo "$(ls "$out"/done.* 2>/dev/null | wc -l) of $steps steps done"; exit 0
    fi
}

for mode in key n m; do
    step "remeasure-$mode" python3 -m bench.loo_remeasure --loo "$loo" --kernel rmsnorm --mode "$mode" --repeats 2 \
        --budget-s 420 --resume --out "$out/loo-remeasure-rmsnorm-$mode.json"
done
step tune-new python3 -m flyconfigs tune rmsnorm --key-grid "$new" --resume --out "$tuned/rmsnorm-new"
step off-grid-new env FLYCONFIGS_PATH="$PWD/artifacts/sm90" python3 -m bench.off_grid rmsnorm --tuned "$tuned/rmsnorm-new" \
    --rule nearest --rule paired --rule paired-se --out "$out/off-grid-new-rmsnorm.json"
gpu_tests="python3 -m pytest tests/gpu/test_fused_add_rmsnorm_gpu.py -q -rs -p no:cacheprovider"
step tests-space-4352 bash -c "$gpu_tests -k 'every_config_of_the_space and 4352' > '$out/gpu-tests-fused-space-4352.log' 2>&1"
step tests-space-rest bash -c "$gpu_tests -k 'every_config_of_the_space and not 4352' > '$out/gpu-tests-fused-space-rest.log' 2>&1"
ls "$out"/done.* 2>/dev/null | wc -l | xargs -I{} echo "{} of $steps steps done"
