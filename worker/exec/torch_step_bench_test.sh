#!/usr/bin/env bash
# torch_step_bench.py keeps PyTorch to the thread count it is given: at
# THREADS=1 the process has one thread (an unpinned OpenBLAS starts one per
# core, which made PyTorch's one-thread dense products run on every core),
# and at THREADS=2 it prints the same three figures. Skips, saying so, where
# Debian's python3-torch is not installed.
# Usage: torch_step_bench_test.sh <torch_step_bench.py> <model.json> <config.json>
set -euo pipefail

script="$1" model="$2" config="$3"
if ! /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then
  echo "SKIPPED: python3-torch is not installed (apt-get install --no-install-recommends python3-torch)"
  exit 0
fi
for threads in 1 2; do
  # Whatever the caller's environment says.
  out=$(OPENBLAS_NUM_THREADS=8 OMP_NUM_THREADS=8 \
        /usr/bin/python3 "$script" "$model" "$config" 20 "$threads")
  read -r ms cores tasks extra <<<"$out"
  if ! [[ "$ms" =~ ^[0-9]+\.[0-9]+$ && "$cores" =~ ^[0-9]+\.[0-9]+$ &&
          "$tasks" =~ ^[0-9]+$ && -z "${extra:-}" ]]; then
    echo "THREADS=$threads: expected \"ms cores threads\", got: $out"
    exit 1
  fi
  if [[ "$threads" == 1 && "$tasks" != 1 ]]; then
    echo "THREADS=1: the process ended with $tasks threads (want 1): $out"
    exit 1
  fi
  echo "THREADS=$threads: $out"
done
echo "torch_step_bench pinning: OK"
