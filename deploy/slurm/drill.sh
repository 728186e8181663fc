#!/usr/bin/env bash
# The Slurm fleet-audit drill, on a real Slurm cluster built on this host:
# munged, slurmctld and four slurmd (nodes n1..n4, one per port on
# 127.0.0.1, from a slurm.conf generated in a scratch folder), a Lockstep
# coordinator on loopback, and lockstep-audit-partition.sh run against the
# partition. Node n3's worker flips one bit in every run (a fault drill), so
# the audit must name it the outlier and the batch script must drain n3 in
# Slurm with the audit's reason, while n1, n2 and n4 stay up.
#
# Debian's slurmd runs several daemons on one host: each is started as
# `slurmd -N <node>` and listens on its node's Port= from slurm.conf. The
# nodes share this host's machine id, so each worker gets its own
# --machine_id_file (through LOCKSTEP_NODE_FLAGS) to count as a device of
# its own in the audit's majority vote.
#
# Every daemon runs in the foreground as a child of this script and is
# stopped by its PID at exit; every wait has a timeout (the whole drill is
# bounded by LOCKSTEP_DRILL_TIMEOUT_S, default 150 s). Needs root (slurmd
# runs job steps as their user).
#
# Usage: drill.sh [BIN_DIR]   (a bazel-bin tree; default $LOCKSTEP_BIN_DIR,
#        else the three binaries are built with bazel)
# Exit: 0 PASS, 1 FAIL, 77 SKIP (Slurm or munge missing, or not root).
set -uo pipefail

start_s=${SECONDS}
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
budget="${LOCKSTEP_DRILL_TIMEOUT_S:-150}"

say() { echo "slurm-drill: $*"; }

missing=()
for tool in munged slurmctld slurmd sbatch srun scontrol sinfo squeue \
    scancel python3; do
  command -v "${tool}" >/dev/null 2>&1 || missing+=("${tool}")
done
if [[ "${#missing[@]}" -gt 0 ]]; then
  say "SKIP: ${missing[*]} not found (Debian packages slurm-wlm, munge)"
  exit 77
fi
if [[ "$(id -u)" -ne 0 ]]; then
  say "SKIP: needs root (slurmd starts job steps as the job's user)"
  exit 77
fi

bin="${1:-${LOCKSTEP_BIN_DIR:-}}"
if [[ -z "${bin}" ]]; then
  say "building lockstep-coordinator, lockstep-worker and lockstep"
  (cd "${root}" && bazel build //server:lockstep-coordinator \
    //worker:lockstep-worker //client:lockstep) || {
    say "FAIL: the build failed"; exit 1; }
  bin="$(cd "${root}" && bazel info bazel-bin 2>/dev/null)"
fi
coordinator_bin="${bin}/server/lockstep-coordinator"
for b in "${coordinator_bin}" "${bin}/worker/lockstep-worker" \
    "${bin}/client/lockstep"; do
  [[ -x "${b}" ]] || { say "FAIL: ${b} is not built"; exit 1; }
done

work="$(mktemp -d /tmp/lockstep-slurm-drill.XXXXXX)"
chmod 755 "${work}"
pids=()
job=""
finish() {
  local rc=$?
  trap - EXIT
  # Our job first (if the drill timed out with it running), then the
  # daemons this script started, by PID, newest first.
  if [[ -n "${job}" ]]; then scancel "${job}" >/dev/null 2>&1 || true; fi
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${pid}" 2>/dev/null || true
    wait "${pid}" 2>/dev/null || true
  done
  if [[ "${rc}" -ne 0 && "${LOCKSTEP_DRILL_KEEP:-0}" != "1" ]]; then
    for f in "${work}"/log/*.log "${work}"/lockstep-audit-*.out; do
      [[ -f "${f}" ]] || continue
      echo "----- ${f##*/} (last 15 lines)"
      tail -n 15 "${f}"
    done
  fi
  if [[ "${LOCKSTEP_DRILL_KEEP:-0}" == "1" ]]; then
    say "kept ${work}"
  else
    rm -rf "${work}"
  fi
  exit "${rc}"
}
trap finish EXIT
trap 'exit 1' INT TERM

fail() {
  say "FAIL: $* ($((SECONDS - start_s)) s)"
  exit 1
}
remaining() { echo $((budget - (SECONDS - start_s))); }

# Free TCP ports on loopback: slurmctld and one per slurmd.
mapfile -t ports < <(python3 - <<'PY'
import socket
socks = []
for _ in range(5):
  s = socket.socket()
  s.bind(("127.0.0.1", 0))
  socks.append(s)
for s in socks:
  print(s.getsockname()[1])
PY
)
nodes=(n1 n2 n3 n4)
faulty=n3

mkdir -p "${work}/munge" "${work}/state" "${work}/log" "${work}/spool"
chmod 700 "${work}/munge"
head -c 1024 /dev/urandom >"${work}/munge/munge.key"
chmod 400 "${work}/munge/munge.key"
socket="${work}/munge/munge.sock"
munged --foreground --force --key-file="${work}/munge/munge.key" \
  --socket="${socket}" --pid-file="${work}/munge/munged.pid" \
  --seed-file="${work}/munge/munged.seed" \
  --log-file="${work}/log/munged.log" 2>"${work}/log/munged.out" &
pids+=($!)
for _ in $(seq 1 50); do [[ -S "${socket}" ]] && break; sleep 0.1; done
[[ -S "${socket}" ]] || fail "munged did not start"

host="$(hostname)"
conf="${work}/slurm.conf"
{
  cat <<EOF2
ClusterName=lockstepdrill
SlurmctldHost=${host}(127.0.0.1)
SlurmctldPort=${ports[0]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation=${work}/state
SlurmdSpoolDir=${work}/spool/%n
SlurmctldPidFile=${work}/slurmctld.pid
SlurmdPidFile=${work}/slurmd-%n.pid
SlurmctldLogFile=${work}/log/slurmctld.log
SlurmdLogFile=${work}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=300
EOF2
  for i in "${!nodes[@]}"; do
    echo "NodeName=${nodes[i]} NodeHostname=${host} NodeAddr=127.0.0.1 Port=${ports[i + 1]} CPUs=2 RealMemory=1000 State=UNKNOWN"
  done
  echo "PartitionName=drill Nodes=n[1-4] Default=YES MaxTime=10 State=UP"
} >"${conf}"
export SLURM_CONF="${conf}"

slurmctld -D -i -f "${conf}" >"${work}/log/slurmctld.out" 2>&1 &
pids+=($!)
for n in "${nodes[@]}"; do
  mkdir -p "${work}/spool/${n}"
  slurmd -D -N "${n}" -f "${conf}" >"${work}/log/slurmd-${n}.out" 2>&1 &
  pids+=($!)
done
idle=0
for _ in $(seq 1 150); do
  idle="$(sinfo --noheader --partition=drill --states=idle --format=%D \
    2>/dev/null | awk '{n += $1} END {print n + 0}')"
  [[ "${idle}" -eq "${#nodes[@]}" ]] && break
  sleep 0.2
done
[[ "${idle}" -eq "${#nodes[@]}" ]] || fail "only ${idle} of ${#nodes[@]} nodes came up idle"
say "Slurm is up: slurmctld and ${#nodes[@]} slurmd ($((SECONDS - start_s)) s)"

"${coordinator_bin}" --listen=127.0.0.1:0 --allow_plaintext \
  --port_file="${work}/port" \
  --db="${work}/lockstep.db" --zoo_dir="${root}/examples" \
  --heartbeat_interval_ms=500 --heartbeat_timeout_ms=3000 \
  >"${work}/log/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [[ -s "${work}/port" ]] && break; sleep 0.1; done
[[ -s "${work}/port" ]] || fail "the coordinator did not start"
coordinator="127.0.0.1:$(cat "${work}/port")"
say "coordinator on ${coordinator}"

node_flags=""
for n in "${nodes[@]}"; do
  printf 'd7111%027d\n' "${n#n}" >"${work}/${n}.machine-id"
  node_flags+="${n}:--machine_id_file=${work}/${n}.machine-id"
  if [[ "${n}" == "${faulty}" ]]; then
    node_flags+=" --allow_drills --inject_fault=step=3,layer=fc1,role=WEIGHT,bit=22"
  fi
  node_flags+=";"
done

say "running lockstep-audit-partition.sh drill (fault drill on ${faulty})"
cd "${work}" || fail "cannot enter ${work}"
audit_rc=0
LOCKSTEP_COORDINATOR="${coordinator}" LOCKSTEP_BIN_DIR="${bin}" \
  LOCKSTEP_SLURM_DIR="${here}" LOCKSTEP_NODE_FLAGS="${node_flags}" \
  LOCKSTEP_CONNECT_TIMEOUT_S=30 LOCKSTEP_AUDIT_TIMEOUT_S=60 \
  timeout "$(remaining)" "${here}/lockstep-audit-partition.sh" drill \
  --time=3 >"${work}/partition.out" 2>&1 || audit_rc=$?
sed 's/^/  | /' "${work}/partition.out"
job="$(sed -n 's/.*job \([0-9][0-9]*\) exited.*/\1/p' "${work}/partition.out")"

# The audit found the drill's fault: exit 1 (outliers drained).
[[ "${audit_rc}" -eq 1 ]] || fail "the audit job exited with ${audit_rc}, expected 1 (outliers drained)"

problems=()
for n in "${nodes[@]}"; do
  info="$(scontrol show node "${n}")"
  state="$(sed -n 's/.*\bState=\([^ ]*\).*/\1/p' <<<"${info}" | head -n 1)"
  reason="$(sed -n 's/.*\bReason=\(.*\)$/\1/p' <<<"${info}" | head -n 1)"
  say "${n}: State=${state}${reason:+ Reason=${reason}}"
  if [[ "${n}" == "${faulty}" ]]; then
    [[ "${state}" == *DRAIN* ]] || problems+=("${n} is not drained")
    [[ "${reason}" =~ lockstep\ audit\ [^:]+:\ ${n}:\ OUTLIER\ at\ step\ 3,\ layer\ fc1,\ WEIGHT ]] \
      || problems+=("${n}'s drain reason does not name the audit and the fault: ${reason}")
  else
    [[ "${state}" != *DRAIN* ]] || problems+=("${n} is drained but healthy")
  fi
done
grep -q "${faulty} (node ${faulty}): OUTLIER" "${work}/partition.out" \
  || problems+=("the audit did not name ${faulty} the outlier")
if [[ "${#problems[@]}" -gt 0 ]]; then
  fail "$(IFS=';'; echo "${problems[*]}")"
fi
say "PASS: ${faulty} drained with the audit's reason, the other nodes up ($((SECONDS - start_s)) s)"
