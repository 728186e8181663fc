#!/usr/bin/env bash
# Audits every idle node of a Slurm partition: submits lockstep-audit.sbatch
# with one task per node over all of them, waits for it and prints its
# output (lockstep-audit-<job id>.out in the current folder). Nodes Lockstep quarantines end up drained (see the batch script).
#
# Usage: LOCKSTEP_COORDINATOR=host:port \
#          lockstep-audit-partition.sh PARTITION [SBATCH_ARGS...]
#   e.g. lockstep-audit-partition.sh gpu --gres=gpu:8 --time=01:00:00
# Exit: the batch script's status (0 healthy, 1 outliers drained,
# 2 inconclusive, 3 could not run); 3 also when no node is idle.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
partition="${1:?usage: lockstep-audit-partition.sh PARTITION [SBATCH_ARGS...]}"
shift
: "${LOCKSTEP_COORDINATOR:?set LOCKSTEP_COORDINATOR=host:port}"

nodes="$(sinfo --noheader --partition="${partition}" --states=idle \
  --format='%D' | awk '{n += $1} END {print n + 0}')"
if [[ "${nodes}" -lt 1 ]]; then
  echo "lockstep-audit-partition: no idle node in partition ${partition}" >&2
  exit 3
fi
echo "lockstep-audit-partition: auditing ${nodes} idle node(s) of ${partition}"

# The job's output lands where the batch script's --output says:
# lockstep-audit-<job id>.out in this folder (shared with the batch host).
export LOCKSTEP_SLURM_DIR="${LOCKSTEP_SLURM_DIR:-${here}}"
status=0
job="$(sbatch --parsable --wait --partition="${partition}" \
  --nodes="${nodes}" "$@" "${here}/lockstep-audit.sbatch")" || status=$?
job="${job%%;*}"
if [[ -n "${job}" && -r "lockstep-audit-${job}.out" ]]; then
  cat "lockstep-audit-${job}.out"
fi
echo "lockstep-audit-partition: job ${job:-?} exited with ${status}"
exit "${status}"
