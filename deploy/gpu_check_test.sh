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

# The steps check's arithmetic and digest comparison with a stub worker
# (the real runs need a device): a line per model with the four columns,
# and a block leaf kernel or hash stream run whose digest differs fails the
# check.
stub="$work/stub"
step_models=$(sed -n 's/^STEP_MODELS="\(.*\)"$/\1/p' "$work/bundle/gpu_check.sh")
[ -n "$step_models" ] || fail "no STEP_MODELS in gpu_check.sh"
mkdir -p "$stub/bin"
for m in $step_models; do
  mkdir -p "$stub/runs/$m"
  echo '{"seed": 1, "steps": 40}' > "$stub/runs/$m/cuda.json"
  echo '{}' > "$stub/runs/$m/model.json"
done
cat > "$stub/bin/lockstep-worker" << 'STUB'
#!/bin/bash
digest=0123456789abcdef0123456789abcdef
if [ "${LOCKSTEP_CUDA_LEAF_KERNEL:-}" = block ] &&
  [ -n "${STUB_BLOCK_DIGEST:-}" ]; then
  digest=$STUB_BLOCK_DIGEST
fi
if [ "${LOCKSTEP_CUDA_HASH_STREAM:-}" = on ] &&
  [ -n "${STUB_STREAM_DIGEST:-}" ]; then
  digest=$STUB_STREAM_DIGEST
fi
echo "run 0: tensors stayed on the device: 0 copied in (leaf kernel" \
  "${LOCKSTEP_CUDA_LEAF_KERNEL:-warp}; hash stream" \
  "${LOCKSTEP_CUDA_HASH_STREAM:-off})"
echo "run 0 digest $digest  dataset none"
STUB
chmod +x "$stub/bin/lockstep-worker"
bash "$work/bundle/gpu_check.sh" step-times "$stub" "$work/steps" \
  > "$work/steps.txt" 2>&1 || fail "step-times with a stub worker failed"
n=$(echo $step_models | wc -w)
line='^[a-z0-9_]+: -?[0-9]+\.[0-9] ms/step queued, -?[0-9]+\.[0-9] ms/step'
line="$line waiting, -?[0-9]+\.[0-9] ms/step block, -?[0-9]+\.[0-9] ms/step"
line="$line stream; digest 0123456789abcdef0123456789abcdef in all four\$"
[ "$(grep -Ec "$line" "$work/steps.txt")" -eq "$n" ] ||
  fail "step-times did not print a line per model: $(cat "$work/steps.txt")"
grep -q '"steps": 13' "$work/steps/$(echo $step_models | cut -d' ' -f1).13.json" ||
  fail "step-times did not write a 13-step config"
STUB_BLOCK_DIGEST=ffffffffffffffffffffffffffffffff \
  bash "$work/bundle/gpu_check.sh" step-times "$stub" "$work/steps2" \
  > "$work/steps2.txt" 2>&1 && fail "a differing block-kernel digest passed"
grep -q "DIGESTS DIFFER: warp leaf kernel 0123456789abcdef0123456789abcdef" \
  "$work/steps2.txt" || fail "the digest mismatch was not reported"
STUB_STREAM_DIGEST=eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee \
  bash "$work/bundle/gpu_check.sh" step-times "$stub" "$work/steps4" \
  > "$work/steps4.txt" 2>&1 && fail "a differing hash-stream digest passed"
grep -q "stream run eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee" "$work/steps4.txt" ||
  fail "the hash stream's digest mismatch was not reported"
# A worker that ignores the leaf kernel's variable fails the check too.
sed -i 's/LOCKSTEP_CUDA_LEAF_KERNEL:-warp/UNSET_VARIABLE:-warp/' \
  "$stub/bin/lockstep-worker"
bash "$work/bundle/gpu_check.sh" step-times "$stub" "$work/steps3" \
  > "$work/steps3.txt" 2>&1 && fail "a run on the wrong leaf kernel passed"
grep -q "did not use the block leaf kernel" "$work/steps3.txt" ||
  fail "the wrong leaf kernel was not reported"
# ... and one that ignores the hash stream's.
sed -i 's/UNSET_VARIABLE:-warp/LOCKSTEP_CUDA_LEAF_KERNEL:-warp/;
  s/LOCKSTEP_CUDA_HASH_STREAM:-off/UNSET_VARIABLE:-off/' \
  "$stub/bin/lockstep-worker"
bash "$work/bundle/gpu_check.sh" step-times "$stub" "$work/steps5" \
  > "$work/steps5.txt" 2>&1 && fail "a run without the hash stream passed"
grep -q "did not use the warp leaf kernel with the hash stream on" \
  "$work/steps5.txt" || fail "the ignored hash stream was not reported"

echo "PASS"
