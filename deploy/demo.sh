#!/usr/bin/env bash
# The Lockstep demo: builds the binaries, starts a coordinator on its
# embedded SQLite default (lockstep.db in the demo folder) and local workers
# on loopback — one per CPU kernel path this machine can run, a fault-drill
# worker, and a simulated fleet of five machines — and shows what the
# coordinator concludes: RUN_TO_RUN and CROSS_CLASS certificates (no
# CROSS_DEVICE: there is one device), a DEFAULT-mode report, a flagged
# divergence, and fleet audits with and without a majority. Everything
# runs over TLS: a test CA made by `lockstep-coordinator certs`, a
# certificate per worker (its CN is the worker's name) and an admin token
# for the CLI.
#
# Environment:
#   LOCKSTEP_BIN_DIR   use binaries from this bazel-bin tree instead of building
#   LOCKSTEP_DEMO_DIR  working folder (default: .demo in the repository)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

if [ -z "${LOCKSTEP_BIN_DIR:-}" ]; then
  echo "demo: building lockstep-coordinator, lockstep-worker and lockstep"
  bazel build //server:lockstep-coordinator //worker:lockstep-worker //client:lockstep
  bin="$(bazel info bazel-bin 2>/dev/null)"
else
  bin="$LOCKSTEP_BIN_DIR"
fi
coordinator="$bin/server/lockstep-coordinator"
worker="$bin/worker/lockstep-worker"
cli="$bin/client/lockstep"
for b in "$coordinator" "$worker" "$cli"; do
  [ -x "$b" ] || { echo "demo: $b was not built" >&2; exit 1; }
done

echo
echo "\$ lockstep-worker probe"
"$worker" probe
echo

demo="${LOCKSTEP_DEMO_DIR:-$root/.demo}"
mkdir -p "$demo"
cd "$demo"
# A fresh database each time, so earlier demos (a quarantined worker, old
# jobs) do not change what this one shows.
rm -f port lockstep.db lockstep.db-wal lockstep.db-shm
rm -rf tls

# TLS and a token: a test CA with the coordinator's certificate and one per
# worker, and an admin token (stored hashed in the database).
"$coordinator" certs --out_dir=tls \
  --workers=demo-avx512,demo-avx2,demo-scalar,demo-faulty,fleet-1,fleet-2,fleet-3,fleet-4,fleet-5 \
  >certs.log 2>&1 || { echo "demo: certs failed; see $demo/certs.log" >&2; exit 1; }
token=$("$coordinator" tokens create --db=lockstep.db --name=demo-admin --role=admin)
echo "demo: test CA and certificates in $demo/tls, an admin token for the CLI"
# The TLS flags of a worker named $1.
tls() { echo "--ca=tls/ca.crt --cert=tls/worker-$1.crt --key=tls/worker-$1.key"; }

pids=()
cleanup() {
  # Stop only the processes this script started, by PID.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "demo: starting the coordinator (database $demo/lockstep.db)"
"$coordinator" --listen=127.0.0.1:0 --port_file=port --zoo_dir="$root/examples" \
  --tls_cert=tls/server.crt --tls_key=tls/server.key --worker_ca=tls/ca.crt \
  >coordinator.log 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s port ] && break; sleep 0.1; done
[ -s port ] || { echo "demo: the coordinator did not start; see $demo/coordinator.log" >&2; exit 1; }
address="127.0.0.1:$(cat port)"
echo "demo: coordinator listening on $address (TLS, worker certificates, bearer tokens)"
cli_flags=(--coordinator="$address" --ca=tls/ca.crt --token="$token")

# Kernel paths this CPU can run: each forced path is its own hardware class
# (LOCKSTEP_CPU_ISA), so one machine can show CROSS_CLASS honestly. They
# are all one device, so nothing here earns CROSS_DEVICE.
paths=()
for isa in avx512 avx2 scalar; do
  if LOCKSTEP_CPU_ISA=$isa "$worker" probe --json 2>/dev/null \
      | grep -q "\"kernel_path\": \"$isa\""; then
    paths+=("$isa")
  fi
done
names=()
for isa in "${paths[@]}"; do
  # shellcheck disable=SC2046  # tls prints separate flags
  LOCKSTEP_CPU_ISA=$isa "$worker" daemon --coordinator="$address" \
    --name="demo-$isa" --labels="demo=true,isa=$isa,pair=$isa" $(tls "demo-$isa") \
    >"worker-$isa.log" 2>&1 &
  pids+=($!)
  names+=("demo-$isa")
done
# A drill worker beside the first path's worker: it flips one bit of one
# tensor in every run (and says so in its hardware profile), as a faulty
# device would.
# shellcheck disable=SC2046
"$worker" daemon --coordinator="$address" --name="demo-faulty" \
  --labels="demo=drill,pair=${paths[0]}" $(tls demo-faulty) \
  --allow_drills --inject_fault=step=3,layer=fc1,role=WEIGHT,bit=22 \
  >worker-faulty.log 2>&1 &
pids+=($!)
names+=("demo-faulty")
# A simulated fleet of five machines (each its own machine-id file), one of
# them faulty, for the audit.
for n in 1 2 3 4 5; do
  printf 'f1ee7%027d\n' "$n" >"fleet-$n.machine-id"
  extra=()
  [ "$n" = 5 ] && extra=(--allow_drills --inject_fault=step=1,layer=fc2,role=ACTIVATION,bit=22)
  # shellcheck disable=SC2046
  "$worker" daemon --coordinator="$address" --name="fleet-$n" $(tls "fleet-$n") \
    --labels=fleet=simulated --machine_id_file="fleet-$n.machine-id" \
    "${extra[@]}" >"fleet-$n.log" 2>&1 &
  pids+=($!)
  names+=("fleet-$n")
done
want=${#names[@]}
echo "demo: started ${names[*]}"

connected=0
for _ in $(seq 1 300); do
  connected=$("$cli" "${cli_flags[@]}" workers --json 2>/dev/null \
    | grep -c '"state": "WORKER_CONNECTED"' || true)
  [ "$connected" -ge "$want" ] && break
  sleep 0.2
done
if [ "$connected" -lt "$want" ]; then
  echo "demo: only $connected of $want workers connected; logs are in $demo" >&2
  exit 1
fi

run() {
  echo
  echo "\$ lockstep $*"
  "$cli" "${cli_flags[@]}" --zoo="$root/examples" "$@"
}

run workers
echo "demo: $want workers connected (kernel paths: ${paths[*]})"
# Without the token the coordinator refuses (the CLI exits 3).
echo
echo "\$ lockstep --ca=tls/ca.crt workers   # no token"
"$cli" --coordinator="$address" --ca=tls/ca.crt workers || true

# 1. RUN_TO_RUN: two CANONICAL runs on one worker.
run submit mlp --runs=2 --scope=same_worker --worker_labels=isa="${paths[0]}" --watch

# 2. CROSS_CLASS: one CANONICAL run on every kernel path. The classes differ
#    (vector width, FMA use), the bits do not.
run submit mlp --runs="${#paths[@]}" --scope=across_classes --worker_labels=demo=true --watch
run certificates

# 3. DEFAULT mode: what stock frameworks do. The CPU's DEFAULT kernels add
#    partial sums in thread-arrival order (split-K dense, bias and conv
#    weight gradients), so the two runs may or may not agree; either way the
#    report says where they split and which kernel variant ran there.
run submit gauntlet --mode=default --runs=2 --scope=same_worker --worker_labels=isa="${paths[0]}" --watch

# 4. A flagged divergence: the same job on a healthy and on the faulty
#    worker, as a CI check would run it (exit code 1: nondeterministic).
set +e
run check mlp --runs=2 --scope=same_class --worker_labels=pair="${paths[0]}"
echo "demo: lockstep check exited with $?"
set -e

# 5. A fleet audit votes per tensor across devices: the faulty machine is
#    named with the first tensor where it leaves the majority, and
#    quarantined.
run audit start mlp --worker_labels=fleet=simulated --quarantine
# Two workers are no majority: the audit says so and quarantines nobody.
run audit start mlp --workers=fleet-1,demo-faulty --quarantine
run workers
echo
echo "demo: done (database $demo/lockstep.db, logs in $demo)"
