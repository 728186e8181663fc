#!/usr/bin/env bash
# One task of the worker job step that lockstep-audit.sbatch starts with
# srun, one task per node: starts a Lockstep worker for each GPU Slurm gave
# this task (or one for the CPU on a node without GPUs) and keeps them
# running until the step is signalled.
#
# Names: the worker is named after the Slurm node ($SLURMD_NODENAME), with
# -gpuN per GPU (N: the GPU's index on the node), and labelled
# slurm_job=<job id>,slurm_node=<node>, which is how the batch script finds
# this job's workers and maps a quarantined worker back to its node.
#
# Environment (exported by sbatch):
#   LOCKSTEP_COORDINATOR    coordinator host:port (required)
#   LOCKSTEP_WORKER_BIN     the lockstep-worker binary (set by the batch script)
#   LOCKSTEP_WORKER_FLAGS   extra flags for every worker, e.g. --data_root=DIR
#   LOCKSTEP_WORKER_LABELS  extra labels, k=v,...
#   LOCKSTEP_NODE_FLAGS     extra flags for some nodes only:
#                           "NODE:FLAGS;NODE:FLAGS", e.g. drills or
#                           --machine_id_file per node
set -uo pipefail

node="${SLURMD_NODENAME:?lockstep-worker-step: not inside a Slurm job step}"
coordinator="${LOCKSTEP_COORDINATOR:?lockstep-worker-step: LOCKSTEP_COORDINATOR is not set}"
worker_bin="${LOCKSTEP_WORKER_BIN:-lockstep-worker}"
labels="slurm_job=${SLURM_JOB_ID:-none},slurm_node=${node}"
if [[ -n "${LOCKSTEP_WORKER_LABELS:-}" ]]; then
  labels+=",${LOCKSTEP_WORKER_LABELS}"
fi

read -r -a flags <<<"${LOCKSTEP_WORKER_FLAGS:-}"
IFS=';' read -r -a entries <<<"${LOCKSTEP_NODE_FLAGS:-}"
for entry in "${entries[@]}"; do
  if [[ "${entry%%:*}" == "${node}" ]]; then
    read -r -a more <<<"${entry#*:}"
    flags+=("${more[@]}")
  fi
done

# The GPUs of this task, as Slurm's gres plugin set them: CUDA_VISIBLE_DEVICES
# selects them (it is renumbered from 0 where the cgroup constrains
# devices), SLURM_STEP_GPUS / SLURM_JOB_GPUS give their indices on the node,
# used in the workers' names. None set: a CPU worker.
split() { local IFS=','; read -r -a "$1" <<<"$2"; }
visible=()
ids=()
if [[ -n "${CUDA_VISIBLE_DEVICES:-}" && "${CUDA_VISIBLE_DEVICES}" != "NoDevFiles" ]]; then
  split visible "${CUDA_VISIBLE_DEVICES}"
fi
split ids "${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}}"
if [[ "${#visible[@]}" -eq 0 ]]; then
  visible=("${ids[@]}")
elif [[ "${#ids[@]}" -ne "${#visible[@]}" ]]; then
  ids=("${visible[@]}")
fi

pids=()
stop() {
  for pid in "${pids[@]}"; do kill -TERM "${pid}" 2>/dev/null || true; done
}
trap stop TERM INT

if [[ "${#visible[@]}" -eq 0 ]]; then
  echo "lockstep-worker-step: ${node}: one CPU worker ${node} ${flags[*]}"
  "${worker_bin}" daemon --coordinator="${coordinator}" --name="${node}" \
    --labels="${labels}" "${flags[@]}" &
  pids+=($!)
else
  for i in "${!visible[@]}"; do
    name="${node}-gpu${ids[i]}"
    echo "lockstep-worker-step: ${node}: worker ${name} on GPU ${ids[i]} ${flags[*]}"
    CUDA_VISIBLE_DEVICES="${visible[i]}" "${worker_bin}" daemon \
      --coordinator="${coordinator}" --name="${name}" \
      --labels="${labels},gpu=${ids[i]}" "${flags[@]}" &
    pids+=($!)
  done
fi

# Wait for every daemon. A trapped signal interrupts `wait` while the daemon
# is still stopping, so wait again until it has exited, and report its own
# status.
status=0
for pid in "${pids[@]}"; do
  while :; do
    rc=0
    wait "${pid}" || rc=$?
    if [[ "${rc}" -gt 128 ]] && kill -0 "${pid}" 2>/dev/null; then
      continue
    fi
    break
  done
  [[ "${rc}" -eq 0 ]] || status="${rc}"
done
exit "${status}"
