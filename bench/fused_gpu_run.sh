#!/usr/bin/env bash
# The fused add + RMSNorm work of one sm90 GPU (H100 or H200), from the checkout's root, in
# steps of at most 8 minutes that each leave a marker under OUT and are skipped once done,
# so the script can be run again (on a fresh machine too) until every step has run:
#   1. the fused op's GPU tests in three steps (every config of the space, the prepared eager paths);
#   2. the new space tuned at M = 96-333 rows, N = 2048-8192 (and 4352), then a handful of
#      other shapes (tune --resume: a step cut short goes on where it stopped);
#   3. Inductor's generated code for three of those shapes (TORCH_LOGS=output_code);
#   4. bench/fused_add_rmsnorm.py over those shapes with every peer in one process;
#   5. the eager per-call benchmark (bench/fused_eager.py);
#   6. RMSNorm at its worst long rows (640, 5000, 12000 x 12800, 18432): served, then tuned.
# Everything lands under OUT: tuned/ (artifacts), *.log, fused-*.json, fused-eager.json,
# inductor-output-code.log, done.* markers.  Served as a user of the next release would be:
# the new tunings first, then artifacts/sm90 where the checkout has it.
#
# Usage: [ONE_STEP=1] bench/fused_gpu_run.sh OUT [QUACK_SITE]
# ONE_STEP=1 runs at most one step that is not done yet and exits (for machines whose calls
# are limited to 10 minutes: call it again, OUT kept, until it says 12 of 12).
set -uo pipefail
out=$(realpath -m "$1"); quack=${2:+--quack-site $2}
tuned=$out/tuned; mkdir -p "$tuned"
export PYTHONUNBUFFERED=1
limit=470  # seconds per step, under the machine's 10 minutes a command
mid="M=96,128,256,333 N=2048,4096,4352,8192 dtype=bf16"
more="M=1,8,1024,16384 N=1600,2880,5120,15360 dtype=bf16"

step() {  # step NAME COMMAND...: run unless done; mark done on success
    local name=$1; shift
    if [[ -e $out/done.$name ]]; then echo "skip $name (done)"; return 0; fi
    echo "run $name"
    if timeout "$limit" "$@"; then touch "$out/done.$name"; else echo "$name stopped (rc $?): run the script again"; fi
    if [[ -n ${ONE_STEP:-} ]]; then  # one step a call: a call of the machine runs at most 10 minutes
        echo "$(ls "$out"/done.* 2>/dev/null | wc -l) of 12 steps done"; exit 0
    fi
}

gpu_tests="python3 -m pytest tests/gpu/test_fused_add_rmsnorm_gpu.py -q -rs -p no:cacheprovider"
step tests-rest bash -c "$gpu_tests -k 'not every_config_of_the_space' > '$out/gpu-tests-fused-rest.log' 2>&1"
step tests-space-new bash -c "$gpu_tests -k 'every_config_of_the_space and (4352 or 2880 or 1600)' > '$out/gpu-tests-fused-space-new.log' 2>&1"
step tests-space bash -c "$gpu_tests -k 'every_config_of_the_space and not (4352 or 2880 or 1600)' > '$out/gpu-tests-fused-space.log' 2>&1"
step tune-mid python3 -m flyconfigs tune fused_add_rmsnorm --key-grid "$mid" --resume --out "$tuned/fused-mid"
step tune-more python3 -m flyconfigs tune fused_add_rmsnorm --key-grid "$more" --resume --out "$tuned/fused-more"
step inductor bash -c "TORCH_LOGS=output_code python3 -m bench.inductor_dump 96x4352 256x4096 256x8192 2> '$out/inductor-output-code.log'"
path=$tuned/fused-mid:$tuned/fused-more
[[ -d artifacts/sm90 ]] && path=$path:$PWD/artifacts/sm90
export FLYCONFIGS_PATH=$path
# shellcheck disable=SC2086  # $quack is two words or none
step bench-mid-a python3 -m bench.fused_add_rmsnorm --grid "M=96,128 N=2048,4096,4352,8192 dtype=bf16" --samples 10 $quack --out "$out/fused-mid-a.json"
# shellcheck disable=SC2086
step bench-mid-b python3 -m bench.fused_add_rmsnorm --grid "M=256,333 N=2048,4096,4352,8192 dtype=bf16" --samples 10 $quack --out "$out/fused-mid-b.json"
# shellcheck disable=SC2086
step bench-more python3 -m bench.fused_add_rmsnorm --grid "$more" --samples 10 $quack --out "$out/fused-more.json"
step eager python3 -m bench.fused_eager --out "$out/fused-eager.json"
# RMSNorm's worst long rows, served from artifacts/sm90 alone (borrowed configs, now
# without the ones that spill past their occupancy bound), then each key's own tuning.
long="M=640,5000,12000 N=12800,18432 dtype=bf16"
# shellcheck disable=SC2086
step bench-rms-long env FLYCONFIGS_PATH="$PWD/artifacts/sm90" python3 -m bench.rmsnorm --grid "$long" --samples 10 $quack --out "$out/rmsnorm-long.json"
step tune-rms-long python3 -m flyconfigs tune rmsnorm --key-grid "$long" --resume --out "$tuned/rmsnorm-long"
ls "$out"/done.* 2>/dev/null | wc -l | xargs -I{} echo "{} of 12 steps done"
