#!/usr/bin/env bash
# The device checks of docs/gpu.md ("Runs on a GPU") as one prepared script,
# for a GPU machine that has a driver but no build tools and little time.
#
#   deploy/gpu_check.sh pack DIR     # here: build -c opt, copy the binaries,
#                                    # the libraries they link and the run
#                                    # configs into DIR, and DIR.tar.gz
#   deploy/gpu_check.sh run DIR OUT  # on the GPU machine: every check, each
#                                    # under its own time limit; logs and
#                                    # OUT/SUMMARY.txt
#   deploy/gpu_check.sh assemble BIN_ROOT SRC_ROOT DIR
#                                    # pack without building: binaries
#                                    # already under BIN_ROOT
#   deploy/gpu_check.sh step-times DIR SCRATCH
#                                    # the `steps` check alone (needs a
#                                    # device): CUDA ms/step per model,
#                                    # fingerprints queued, waited for,
#                                    # queued with the block-per-leaf
#                                    # kernel, and queued on a hash
#                                    # stream of their own (those two
#                                    # run digests must be the queued
#                                    # run's)
#
# `run` takes the checks in order of what they prove (the GPU suite, the
# selftest, whole CANONICAL runs CPU against CUDA, step times on the
# device, the vendor suite, the benchmark) and never stops early: a check that fails or runs out of time
# is written down and the next one starts. Environment for `run`:
#   GPU_CHECK_ONLY      space-separated subset of: suite selftest runs
#                       steps vendor bench (default: all, in that order)
#   GPU_CHECK_SCALE     multiplies every time limit (default 1)
#   LOCKSTEP_VENDOR_LIBRARY_DIR  where cuBLAS and cuDNN are; when unset,
#                       the first usual directory holding both (docs/gpu.md,
#                       "Vendor libraries"), else, where they lie apart (the
#                       CUDA toolkit's cuBLAS, a Python environment's
#                       nvidia-cudnn wheel), a scratch directory of links
#                       to both
# Exit status of `run`: 0 when every check that ran passed, 1 otherwise,
# 2 for bad usage. Without a device the GPU tests skip, the selftest and
# the benchmark say why, the CUDA runs are left out (the CPU runs still
# run) and `run` exits 0: CI tests the script that way
# (deploy/gpu_check_test.sh).
set -uo pipefail

# The comment block at the top of this file.
usage() {
  awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" >&2
  exit 2
}

# The zoo models whole runs check, with their step counts: every model
# once, the two largest for 2 steps (docs/gpu.md, "Runs on a GPU").
RUN_MODELS="mlp:3 lenet5:3 norm_mlp:3 resnet_small:3 resnet_bn:3 \
mobilenet_tiny:3 conv_autoencoder:3 gauntlet:3 char_lm:3 gpt_tiny:3 \
vit_tiny:3 resnet18:2 mobilenet_v2:2"

# The models whose CUDA step times `steps` measures (docs/gpu.md,
# "Device-resident runs").
STEP_MODELS="resnet18 mobilenet_v2 gpt_tiny"

BINARIES="kernels/cuda/cuda_gpu_test kernels/cudnn/vendor_gpu_test \
kernels/cudnn/gpu_bench worker/lockstep-worker"

pack() {
  local dir="$1"
  local root
  root="$(cd "$(dirname "$0")/.." && pwd)"
  local targets=()
  for b in $BINARIES; do targets+=("//${b%/*}:${b##*/}"); done
  (cd "$root" && bazel build -c opt "${targets[@]}") || exit 1
  local bin_root
  bin_root="$(cd "$root" && bazel info -c opt bazel-bin)" || exit 1
  assemble "$bin_root" "$root" "$dir"
  git -C "$root" rev-parse HEAD > "$dir/COMMIT" 2> /dev/null || true
  # One compressed file to carry (the fat CUDA binaries shrink about 3x).
  tar czf "$dir.tar.gz" -C "$(dirname "$dir")" "$(basename "$dir")" || exit 1
  du -sh "$dir" "$dir.tar.gz"
}

# The binaries under BIN_ROOT (as Bazel lays them out), the libraries they
# link, and one CPU and one CUDA config per model of SRC_ROOT/examples.
assemble() {
  local bin_root="$1" src_root="$2" dir="$3"
  mkdir -p "$dir/bin" "$dir/lib" "$dir/runs" || exit 1
  for b in $BINARIES; do
    # Debug sections stripped: the copies must travel (docs/gpu.md).
    strip --strip-debug -o "$dir/bin/${b##*/}" "$bin_root/$b" || exit 1
  done
  # Every library the binaries link but the C library's own (the target's
  # glibc serves those) and the CUDA driver's (the target's).
  local libs lib
  # (ldd on the originals: a test binary finds Bazel's own shared
  # libraries through a relative run path, which the copy loses.)
  libs="$(for b in $BINARIES; do ldd "$bin_root/$b"; done |
    awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)"
  for lib in $libs; do
    case "${lib##*/}" in
      libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
        ld-linux* | libcuda.so* | libnvidia*) continue ;;
    esac
    cp -L "$lib" "$dir/lib/" || exit 1
  done
  # The zoo config with the backend, CANONICAL, every step fingerprinted
  # and a few steps.
  local entry model steps backend
  for entry in $RUN_MODELS; do
    model="${entry%%:*}"
    steps="${entry##*:}"
    mkdir -p "$dir/runs/$model" || exit 1
    cp "$src_root/examples/$model/model.json" "$dir/runs/$model/" || exit 1
    for backend in CPU CUDA; do
      /usr/bin/python3 - "$src_root/examples/$model/config.json" "$steps" \
        "$backend" > "$dir/runs/$model/${backend,,}.json" << 'PY' || exit 1
import json, sys
config = json.load(open(sys.argv[1]))
config.update(steps=int(sys.argv[2]), backend=sys.argv[3],
              determinism="CANONICAL", capture={"kind": "EVERY_STEP"})
print(json.dumps(config, indent=1))
PY
    done
  done
  cp "$0" "$dir/gpu_check.sh" || exit 1
}

# Runs a check under a time limit; appends its line to SUMMARY.txt.
# check NAME LIMIT_S LOG COMMAND...
FAILED=0
check() {
  local name="$1" limit="$2" log="$3"
  shift 3
  limit=$(awk -v l="$limit" -v s="${GPU_CHECK_SCALE:-1}" \
    'BEGIN { printf "%d", l * s }')
  local start end rc
  start=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$log" 2>&1
  rc=$?
  end=$(date +%s)
  local verdict=pass
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    verdict="TIMEOUT after ${limit}s"
    FAILED=1
  elif [ "$rc" -ne 0 ]; then
    verdict="FAIL (exit $rc)"
    FAILED=1
  fi
  printf '%-28s %-22s %5ds  %s\n' "$name" "$verdict" $((end - start)) \
    "$log" >> "$OUT/SUMMARY.txt"
  return "$rc"
}

wants() {
  case " ${GPU_CHECK_ONLY:-suite selftest runs steps vendor bench} " in
    *" $1 "*) return 0 ;;
  esac
  return 1
}

# The directory for LOCKSTEP_VENDOR_LIBRARY_DIR: the first usual directory
# holding both libcublas.so* and libcudnn.so*; else, when the two lie in
# different directories (Python environments' nvidia-* wheels count), a
# scratch directory of links to both; else the first holding cuBLAS (the
# cuDNN kernels then say what is missing). Nothing when there is no cuBLAS.
vendor_library_dir() {
  local usual=(/usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu /usr/local/lib
    /opt/nvidia/lib64)
  local d cublas="" cudnn=""
  for d in "${usual[@]}"; do
    if compgen -G "$d/libcublas.so*" > /dev/null &&
      compgen -G "$d/libcudnn.so*" > /dev/null; then
      echo "$d"
      return
    fi
  done
  for d in "${usual[@]}" /usr/local/lib/python3*/dist-packages/nvidia/*/lib \
    /usr/lib/python3/dist-packages/nvidia/*/lib \
    /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib; do
    [ -d "$d" ] || continue
    [ -z "$cublas" ] && compgen -G "$d/libcublas.so*" > /dev/null && cublas="$d"
    [ -z "$cudnn" ] && compgen -G "$d/libcudnn.so*" > /dev/null && cudnn="$d"
  done
  if [ -n "$cublas" ] && [ -n "$cudnn" ]; then
    local links
    links="$(mktemp -d)" || return
    ln -s "$cublas"/libcublas*.so* "$cudnn"/libcudnn*.so* "$links"/ || return
    echo "$links"
  elif [ -n "$cublas" ]; then
    echo "$cublas"
  fi
}

# Milliseconds per step of a device-resident CUDA run of each STEP_MODELS
# model: wall time at 13 steps minus 3 steps, over 10 (process start and
# CUDA initialisation cancel), each the faster of two runs (one slow
# process start moved a single run's figure by 20 ms a step), with the
# device fingerprints queued (one wait per step), with
# --queue_device_fingerprints=false (one wait per tensor), queued with the
# block-per-leaf leaf kernel (LOCKSTEP_CUDA_LEAF_KERNEL=block), and queued
# on a hash stream of their own (LOCKSTEP_CUDA_HASH_STREAM=on). One line
# per model on stdout; fails when a run fails, when a run did not use the
# leaf kernel or hash stream it asked for, or when the block or stream
# run's digest differs from the queued run's.
# step_times DIR SCRATCH
step_times() {
  local dir="$1" scratch="$2" model steps variant queue leaf hs t0 t1
  mkdir -p "$scratch" || return 1
  for model in $STEP_MODELS; do
    local rd="$dir/runs/$model" line="$model:"
    for steps in 3 13; do
      sed -E "s/\"steps\": [0-9]+/\"steps\": $steps/" "$rd/cuda.json" \
        > "$scratch/$model.$steps.json" || return 1
    done
    for variant in queued waiting block stream; do
      queue=true
      leaf=warp
      hs=off
      [ "$variant" = waiting ] && queue=false
      [ "$variant" = block ] && leaf=block
      [ "$variant" = stream ] && hs=on
      local ns3=0 ns13=0
      local ns best repeat
      for steps in 3 13; do
        best=0
        for repeat in 1 2; do
          t0=$(date +%s%N)
          LOCKSTEP_CUDA_LEAF_KERNEL=$leaf LOCKSTEP_CUDA_HASH_STREAM=$hs \
            "$dir/bin/lockstep-worker" run \
            "--model=$rd/model.json" \
            "--config=$scratch/$model.$steps.json" \
            "--queue_device_fingerprints=$queue" \
            > "$scratch/$model.$steps.$variant.log" 2>&1 || {
            echo "$model: the $steps-step run failed:"
            tail -5 "$scratch/$model.$steps.$variant.log"
            return 1
          }
          t1=$(date +%s%N)
          ns=$((t1 - t0))
          if [ "$best" -eq 0 ] || [ "$ns" -lt "$best" ]; then best=$ns; fi
        done
        if [ "$steps" -eq 3 ]; then ns3=$best; else ns13=$best; fi
      done
      line="$line $(awk -v a="$ns3" -v b="$ns13" \
        'BEGIN { printf "%.1f", (b - a) / 10 / 1e6 }') ms/step $variant,"
      grep -h '^run 0: tensors stayed' "$scratch/$model.13.$variant.log"
      # The run said which leaf kernel and hash stream it used (the
      # variables taken, not ignored).
      grep -q "^run 0: tensors stayed.*leaf kernel $leaf; hash stream $hs)" \
        "$scratch/$model.13.$variant.log" || {
        echo "$model: the $variant run did not use the $leaf leaf kernel" \
          "with the hash stream $hs"
        return 1
      }
    done
    # The block leaf kernel's and the hash stream's run digests must be
    # the queued warp kernel's.
    local d_warp d_other other
    d_warp=$(awk '/^run 0 digest/ { print $4 }' "$scratch/$model.13.queued.log")
    for other in block stream; do
      d_other=$(awk '/^run 0 digest/ { print $4 }' \
        "$scratch/$model.13.$other.log")
      if [ -z "$d_warp" ] || [ "$d_warp" != "$d_other" ]; then
        echo "$model: DIGESTS DIFFER: warp leaf kernel ${d_warp:-none}," \
          "$other run ${d_other:-none}"
        return 1
      fi
    done
    echo "${line%,}; digest $d_warp in all four"
  done
}

run_checks() {
  local dir="$1"
  OUT="$2"
  [ -x "$dir/bin/lockstep-worker" ] || {
    echo "gpu_check: $dir/bin/lockstep-worker missing: run 'pack' first" >&2
    exit 2
  }
  mkdir -p "$OUT" || exit 2
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if [ -z "${LOCKSTEP_VENDOR_LIBRARY_DIR:-}" ]; then
    local vendor_dir
    vendor_dir="$(vendor_library_dir)"
    [ -n "$vendor_dir" ] && export LOCKSTEP_VENDOR_LIBRARY_DIR="$vendor_dir"
  fi
  {
    echo "commit: $(cat "$dir/COMMIT" 2> /dev/null || echo unknown)"
    echo "date: $(date -u +%FT%TZ)"
    echo "vendor libraries: ${LOCKSTEP_VENDOR_LIBRARY_DIR:-not found}"
    if command -v nvidia-smi > /dev/null; then
      nvidia-smi --query-gpu=name,driver_version,memory.total \
        --format=csv,noheader 2>&1
    else
      echo "nvidia-smi: not installed"
    fi
  } > "$OUT/SUMMARY.txt"
  local bin="$dir/bin"
  # The hardware class and whether the worker sees a device at all.
  check "probe" 60 probe.log "$bin/lockstep-worker" probe
  grep -E '^(gpus?|hardware class)' "$OUT/probe.log" | sed 's/^/    /' \
    >> "$OUT/SUMMARY.txt"
  local have_gpu=1
  grep -q '^gpus: *none' "$OUT/probe.log" && have_gpu=0
  if wants suite; then
    check "GPU suite" 300 cuda_gpu_test.log "$bin/cuda_gpu_test"
  fi
  if wants selftest; then
    check "selftest" 240 selftest.log "$bin/lockstep-worker" selftest
    grep -E '^(cuda:|selftest:)' "$OUT/selftest.log" | sed 's/^/    /' \
      >> "$OUT/SUMMARY.txt"
  fi
  if wants runs; then
    local entry model cpu gpu
    for entry in $RUN_MODELS; do
      model="${entry%%:*}"
      local rd="$dir/runs/$model"
      check "run $model cpu" 120 "run_${model}_cpu.log" \
        "$bin/lockstep-worker" run "--model=$rd/model.json" \
        "--config=$rd/cpu.json"
      cpu=$(awk '/^run 0 digest/ { print $4 }' "$OUT/run_${model}_cpu.log")
      if [ "$have_gpu" -eq 0 ]; then
        echo "    $model: CPU run digest ${cpu:-none}; CUDA run skipped" \
          "(no device)" >> "$OUT/SUMMARY.txt"
        [ -n "$cpu" ] || FAILED=1
        continue
      fi
      check "run $model cuda" 180 "run_${model}_cuda.log" \
        "$bin/lockstep-worker" run "--model=$rd/model.json" \
        "--config=$rd/cuda.json"
      gpu=$(awk '/^run 0 digest/ { print $4 }' "$OUT/run_${model}_cuda.log")
      if [ -n "$cpu" ] && [ "$cpu" = "$gpu" ]; then
        echo "    $model: run digest $cpu on both" >> "$OUT/SUMMARY.txt"
      else
        echo "    $model: DIGESTS DIFFER: cpu ${cpu:-none}, cuda ${gpu:-none}" \
          >> "$OUT/SUMMARY.txt"
        FAILED=1
      fi
    done
  fi
  if wants steps; then
    if [ "$have_gpu" -eq 1 ]; then
      check "step times" 360 steps.log bash "$0" step-times "$dir" \
        "$OUT/steps"
      grep -E '^[a-z0-9_]+: .* ms/step' "$OUT/steps.log" | sed 's/^/    /' \
        >> "$OUT/SUMMARY.txt"
    else
      echo "step times                   skipped (no device)" \
        >> "$OUT/SUMMARY.txt"
    fi
  fi
  if wants vendor; then
    check "vendor suite" 240 vendor_gpu_test.log "$bin/vendor_gpu_test"
  fi
  if wants bench; then
    check "gpu_bench" 300 gpu_bench.log "$bin/gpu_bench"
  fi
  cat "$OUT/SUMMARY.txt"
  exit "$FAILED"
}

case "${1:-}" in
  pack) [ $# -eq 2 ] || usage; pack "$2" ;;
  assemble) [ $# -eq 4 ] || usage; assemble "$2" "$3" "$4" ;;
  run) [ $# -eq 3 ] || usage; run_checks "$2" "$3" ;;
  step-times) [ $# -eq 3 ] || usage; step_times "$2" "$3" ;;
  *) usage ;;
esac
