#!/usr/bin/env bash
# Smoke test of //kernels/cpu:cpu_bench: --quick exits 0 and prints every
# summary table. Usage: cpu_bench_smoke_test.sh <cpu_bench binary>
set -euo pipefail

bench="$1"
out="${TEST_TMPDIR:-/tmp}/cpu_bench_quick.out"
if ! "$bench" --quick >"$out" 2>&1; then
  echo "cpu_bench --quick failed; its output:"
  cat "$out"
  exit 1
fi
for header in \
    "== (a) canonical GEMM vs OpenBLAS sgemm" \
    "== (b) cost of determinism: conv2d GFLOP/s per mode" \
    "conv2d training step (forward + grad_input + grad_weight)" \
    "== (c) fingerprinting each op's output" \
    "== (d) bias_add.grad and pooling" \
    "== (e) CANONICAL conv2d per network shape" \
    "== (f) image groups vs the whole batch" \
    "== (g) pool hand-off" \
    "== (h) transformer products"; do
  if ! grep -qF -- "$header" "$out"; then
    echo "cpu_bench --quick did not print \"$header\"; its output:"
    cat "$out"
    exit 1
  fi
done
# Table (e): a row with both ratios, Google Benchmark's and the paired one.
if ! grep -qE "^3x3 64 32px +grad_weight +[0-9x]+ +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2}\$" \
    "$out"; then
  echo "cpu_bench --quick printed no paired ratio in table (e); its output:"
  cat "$out"
  exit 1
fi
# Table (f): the image groups against the whole batch, a ratio per row, on
# one thread and on two, and the shared weights against each group's own
# (forward and grad_input; none for grad_weight).
for threads in 1 2; do
  if ! grep -qE "^3x3 64 32px +grad_input +$threads +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2}\$" \
      "$out"; then
    echo "cpu_bench --quick printed no whole/groups and own/shared ratios on $threads thread(s) in table (f); its output:"
    cat "$out"
    exit 1
  fi
done
if ! grep -qE "^3x3 64 32px +grad_weight +2 +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9]{2} +-\$" \
    "$out"; then
  echo "cpu_bench --quick printed an own/shared ratio for grad_weight in table (f); its output:"
  cat "$out"
  exit 1
fi
# Table (h): a canonical figure for a dense pass and an attention grad.
for row in "dense 256->256 grad_weight" "attn q k\^T grad"; do
  if ! grep -qE "^$row +1 +[0-9]+\.[0-9] " "$out"; then
    echo "cpu_bench --quick printed no canonical figure for \"$row\" in table (h); its output:"
    cat "$out"
    exit 1
  fi
done
echo "cpu_bench --quick: OK"
