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
rm -f port

pids=()
cleanup() {
  # Stop only the processes this script started, by PID.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "demo: starting the coordinator (database $demo/lockstep.db)"
"$coordinator" --listen=127.0.0.1:0 --port_file=port >coordinator.log 2>&1 &
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
echo "demo: started workers demo-worker-1 and demo-worker-2"

connected=0
for _ in $(seq 1 150); do
  connected=$("$cli" --coordinator="$address" workers --json 2>/dev/null \
    | grep -c '"state": "WORKER_CONNECTED"' || true)
  [ "$connected" -ge 2 ] && break
  sleep 0.2
done
if [ "$connected" -lt 2 ]; then
  echo "demo: only $connected of 2 workers connected; logs are in $demo" >&2
  exit 1
fi

echo
echo "\$ lockstep --coordinator=$address workers"
"$cli" --coordinator="$address" workers
echo
echo "demo: 2 workers connected"
