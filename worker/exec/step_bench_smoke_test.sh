#!/usr/bin/env bash
# Smoke test of //worker/exec:step_bench: one step of a zoo model and of a
# benchmark model in every mode, without PyTorch, exits 0 and prints a row
# with a figure for each mode and the CPUs' distance. Usage: step_bench_smoke_test.sh <step_bench>
set -euo pipefail

bench="$1"
out="${TEST_TMPDIR:-/tmp}/step_bench.out"
if ! "$bench" --pytorch=false --steps=1 --repeats=1 --threads=1 \
     --models=mlp,gpt_block >"$out" 2>&1; then
  echo "step_bench failed; its output:"
  cat "$out"
  exit 1
fi
for model in mlp gpt_block; do
  # model, batch, params, threads, steps, then three mode columns with
  # figures.
  if ! grep -Eq "^${model} +[0-9]+ +[0-9]+ +1 +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +- " "$out"; then
    echo "step_bench printed no timed row for ${model}; its output:"
    cat "$out"
    exit 1
  fi
done
# The last column: the CPUs' cache-line round trip in ns ("77", "75-410"),
# or "-" where the process has one CPU.
if ! grep -q " c2c ns$" "$out" ||
   ! grep -E "^(mlp|gpt_block) " "$out" |
       awk '$NF !~ /^([0-9]+(-[0-9]+)?|-)$/ { bad = 1 } END { exit bad }'; then
  echo "step_bench printed no c2c ns column; its output:"
  cat "$out"
  exit 1
fi
if ! grep -q "PyTorch: not timed (--pytorch=false)" "$out"; then
  echo "step_bench did not say PyTorch was skipped; its output:"
  cat "$out"
  exit 1
fi
echo "step_bench smoke: OK"
