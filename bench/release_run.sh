#!/usr/bin/env bash
# The next flyconfigs-sm90 release in one command, on a machine held as long as it takes
# (about 20 minutes on an H100): every step of bench/release_step.sh in order, each given
# an hour (FLYCONFIGS_STEP_BUDGET_S) unless set, resuming a step cut short.  On a GPU
# machine lent for ten minutes a call, run bench/release_step.sh OUT next once per call
# instead (docs/benchmarks.md).  Everything lands under OUT, as release_step.sh says.
#
# Usage: bench/release_run.sh OUT [QUACK_SITE]
set -uo pipefail
export FLYCONFIGS_STEP_BUDGET_S=${FLYCONFIGS_STEP_BUDGET_S:-3600}
step="$(dirname "$0")/release_step.sh"
while :; do
  bash "$step" "$1" next ${2:+"$2"}
  case $? in
    0|3) ;;
    4) exit 0 ;;
    *) exit 1 ;;
  esac
done
