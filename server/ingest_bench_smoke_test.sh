#!/usr/bin/env bash
# Smoke test of //server:ingest_bench: a short run exits 0 and prints, for
# FULL and NORMAL, every fingerprint acknowledged, the ratio to the raw
# SQLite rate and the polling client's ListJobs round trips.
# Usage: ingest_bench_smoke_test.sh <ingest_bench binary>
set -euo pipefail

bench="$1"
out="${TEST_TMPDIR:-/tmp}/ingest_bench_smoke.out"
if ! "$bench" --steps=20 --layers=2 >"$out" 2>&1; then
  echo "ingest_bench failed; its output:"
  cat "$out"
  exit 1
fi
for sync in FULL NORMAL; do
  # 8 workers x 20 steps x 25 fingerprints, all acknowledged; a positive
  # ratio; at least one ListJobs call with its three figures.
  if ! grep -qE "^${sync} +4000 +25 +[0-9]+ +[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+ +[0-9.]+/[0-9.]+/[0-9.]+ \([1-9][0-9]*\)$" "$out"; then
    echo "ingest_bench did not print a complete ${sync} row; its output:"
    cat "$out"
    exit 1
  fi
done
if ! "$bench" --steps=5 --layers=2 --list_every_ms=0 >"$out" 2>&1 ||
    ! grep -qE "^FULL +1000 +25 .* -$" "$out"; then
  echo "ingest_bench --list_every_ms=0 did not print a row without ListJobs; its output:"
  cat "$out"
  exit 1
fi
echo "PASS"
