#!/usr/bin/env bash
# The Lockstep demo: builds the binaries, starts a coordinator on its
# embedded SQLite default (lockstep.db in the demo folder) and two local
# workers on loopback, and shows what the coordinator sees.
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

pids=()
cleanup() {
  # Stop only the processes this script started, by PID.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "demo: starting the coordinator (database $demo/lockstep.db)"
"$coordinator" --listen=127.0.0.1:0 --port_file=port --zoo_dir="$root/examples" \
  >coordinator.log 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s port ] && break; sleep 0.1; done
[ -s port ] || { echo "demo: the coordinator did not start; see $demo/coordinator.log" >&2; exit 1; }
address="127.0.0.1:$(cat port)"
echo "demo: coordinator listening on $address"

for n in 1 2; do
  "$worker" daemon --coordinator="$address" --name="demo-worker-$n" \
    --labels=demo=true >"worker-$n.log" 2>&1 &
  pids+=($!)
done
# A third worker runs a drill: it flips one bit of one tensor in every run
# (and says so in its hardware profile), as a faulty device would.
"$worker" daemon --coordinator="$address" --name="demo-faulty" \
  --labels=demo=drill --inject_fault=step=3,layer=fc1,role=WEIGHT,bit=22 \
  >worker-faulty.log 2>&1 &
pids+=($!)
echo "demo: started workers demo-worker-1, demo-worker-2 and demo-faulty (fault drill)"

connected=0
for _ in $(seq 1 150); do
  connected=$("$cli" --coordinator="$address" workers --json 2>/dev/null \
    | grep -c '"state": "WORKER_CONNECTED"' || true)
  [ "$connected" -ge 3 ] && break
  sleep 0.2
done
if [ "$connected" -lt 3 ]; then
  echo "demo: only $connected of 3 workers connected; logs are in $demo" >&2
  exit 1
fi

run() {
  echo
  echo "\$ lockstep $*"
  "$cli" --coordinator="$address" --zoo="$root/examples" "$@"
}

run workers
echo "demo: 3 workers connected"

# 1. CANONICAL: three runs over the two healthy workers -> certificates.
run submit mlp --runs=3 --scope=same_class --worker_labels=demo=true --watch
run certificates

# 2. DEFAULT mode: what stock frameworks do. The CPU's DEFAULT kernels add
#    partial sums in thread-arrival order (split-K dense, bias and conv
#    weight gradients), so the two runs may or may not agree; either way the
#    report says where they split and why.
run submit gauntlet --mode=default --runs=2 --worker_labels=demo=true --watch

# 3. A flagged divergence: the same job on a healthy and on the faulty
#    worker, as a CI check would run it (exit code 1: nondeterministic).
set +e
run check mlp --runs=2 --scope=same_class
echo "demo: lockstep check exited with $?"
set -e

# 4. A fleet audit names the faulty device and quarantines it.
run audit start mlp --quarantine
run workers
echo
echo "demo: done (database $demo/lockstep.db, logs in $demo)"
