#!/usr/bin/env bash
# Runs deploy/gpu_check.sh assemble + run without a device; see BUILD.
# $1: gpu_check.sh, $2: kernels/cuda/cuda_gpu_test (its path gives the
# root the binaries and examples/ lie under).
set -uo pipefail

script="$1"
bin="$2"
root="$(cd "$(dirname "$bin")/../.." && pwd)"
[ -x "$root/worker/lockstep-worker" ] || {
  echo "FAIL: no lockstep-worker under $root"
  exit 1
}
work="${TEST_TMPDIR:-$(mktemp -d)}"
fail() {
  echo "FAIL: $*"
  [ -f "$work/out/SUMMARY.txt" ] && cat "$work/out/SUMMARY.txt"
  exit 1
}
export CUDA_VISIBLE_DEVICES=""
# The bundle's test binaries must not report into this test's own result
# files: gtest writes the file XML_OUTPUT_FILE names, and Bazel would take
# the last binary's cases for this test's.
unset XML_OUTPUT_FILE GTEST_OUTPUT TEST_PREMATURE_EXIT_FILE \
  TEST_SHARD_STATUS_FILE TEST_TOTAL_SHARDS TEST_SHARD_INDEX \
  TEST_WARNINGS_OUTPUT_FILE

bash "$script" > /dev/null 2>&1
[ $? -eq 2 ] || fail "no arguments: exit status is not 2"

bash "$script" assemble "$root" "$root" "$work/bundle" ||
  fail "assemble failed"
for b in cuda_gpu_test vendor_gpu_test gpu_bench lockstep-worker; do
  [ -x "$work/bundle/bin/$b" ] || fail "bundle lacks bin/$b"
done
[ -x "$work/bundle/gpu_check.sh" ] || fail "bundle lacks gpu_check.sh"
ls "$work/bundle/lib" | grep -q '^libc\.so' && fail "bundle carries libc"
models=13
[ "$(ls "$work/bundle/runs" | wc -l)" -eq "$models" ] ||
  fail "not $models models in runs/"
grep -q '"backend": "CUDA"' "$work/bundle/runs/mlp/cuda.json" ||
  fail "cuda.json does not select CUDA"
grep -q '"steps": 2' "$work/bundle/runs/resnet18/cpu.json" ||
  fail "resnet18 does not run 2 steps"

# Every check, from the bundle's own copy of the script.
bash "$work/bundle/gpu_check.sh" run "$work/bundle" "$work/out" \
  > "$work/run.txt" 2>&1
rc=$?
summary="$work/out/SUMMARY.txt"
[ "$rc" -eq 0 ] || fail "run exited $rc"
for name in "probe" "GPU suite" "selftest" "vendor suite" "gpu_bench"; do
  grep -Eq "^$name +pass " "$summary" || fail "no passing line for $name"
done
grep -q "^    gpus: *none" "$summary" || fail "the probe saw a device"
grep -q "^    selftest: PASS" "$summary" || fail "no selftest verdict"
grep -Eq "^step times +skipped \(no device\)" "$summary" ||
  fail "the step times did not say they were skipped"
[ "$(grep -Ec '^run [a-z0-9_]+ cpu +pass ' "$summary")" -eq "$models" ] ||
  fail "not $models passing CPU runs"
[ "$(grep -Ec '^    [a-z0-9_]+: CPU run digest [0-9a-f]{32}; CUDA run skipped' \
  "$summary")" -eq "$models" ] || fail "not $models CPU digests"
grep -Eq '^run [a-z0-9_]+ cuda' "$summary" &&
  fail "a CUDA run ran without a device"
grep -q "SKIPPED" "$work/out/cuda_gpu_test.log" ||
  fail "the GPU suite did not skip"
grep -q "^no GPU: " "$work/out/gpu_bench.log" ||
  fail "gpu_bench did not say why it measured nothing"

# A broken config is a failed check, and the run's exit status says so.
echo '{"steps": -1}' > "$work/bundle/runs/mlp/cpu.json"
GPU_CHECK_ONLY=runs bash "$work/bundle/gpu_check.sh" run "$work/bundle" \
  "$work/out2" > /dev/null 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "a failing run: exit $rc, not 1"
grep -Eq '^run mlp cpu +FAIL \(exit [0-9]+\)' "$work/out2/SUMMARY.txt" ||
  fail "the failing run is not in the summary"
grep -q "GPU suite" "$work/out2/SUMMARY.txt" &&
  fail "GPU_CHECK_ONLY=runs ran the GPU suite"

echo "PASS"
