#!/usr/bin/env bash
# Builds every libFuzzer harness of fuzz/ under --config=fuzz (clang,
# AddressSanitizer, UBSan) and runs each for SECONDS (default 20) on a copy
# of its seed corpus and regression inputs. Prints executions and exec/s per
# harness; on a crash, leak, timeout or out-of-memory prints the saved input
# and exits 1. docs/fuzzing.md has the details.
#
#   fuzz/run_fuzzers.sh [SECONDS_PER_HARNESS]
#
# The clang build uses an output base of its own (like the thread-safety
# step of deploy/test.sh), so its objects never replace the gcc ones; its
# Bazel server is shut down at the end. FUZZ_HARNESSES="npy idx" limits the
# run to some harnesses.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

seconds="${1:-20}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: fuzz/run_fuzzers.sh [seconds_per_harness]  (a positive integer, default 20)" >&2
  exit 2
fi

all_harnesses=(model_spec job_config json_quote npy idx dataset fault_spec
               drill_flags worker_message http_query onnx_import)
read -r -a harnesses <<<"${FUZZ_HARNESSES:-${all_harnesses[*]}}"

base="${XDG_CACHE_HOME:-$HOME/.cache}/lockstep-fuzz"
shutdown() {
  bazel --output_base="$base" shutdown >/dev/null 2>&1 || true
}
trap shutdown EXIT

targets=(//fuzz:worker_message_seeds)
for h in "${harnesses[@]}"; do targets+=("//fuzz:${h}_fuzzer"); done

start=$SECONDS
echo "fuzz: building ${#harnesses[@]} harnesses (clang, ASan, UBSan; output base $base)"
# gold warns once per harness about ASan's local symbols; harmless.
bazel --output_base="$base" build --config=fuzz "${targets[@]}" 2>&1 |
  grep -v "Cannot export local symbol"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
  echo "fuzz: FAILED to build the harnesses"
  exit 1
fi
bin="$(bazel --output_base="$base" info --config=fuzz bazel-bin 2>/dev/null)"
echo "fuzz: built in $((SECONDS - start)) s"

work="$(mktemp -d "${TMPDIR:-/tmp}/lockstep-fuzz.XXXXXX")"
failed=0
printf '\n%-16s %12s %10s  %s\n' harness executions exec/s result
for h in "${harnesses[@]}"; do
  dir="$work/$h"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  for seeds in "fuzz/corpus/$h" "fuzz/regressions/$h"; do
    [ -d "$seeds" ] && cp -R "$seeds/." "$dir/corpus/"
  done
  if [ "$h" = worker_message ]; then
    cp "$bin"/fuzz/worker_message_seeds/*.bin "$dir/corpus/"
  fi
  chmod -R u+w "$dir/corpus"
  dict=()
  [ -f "fuzz/dicts/$h.dict" ] && dict=("-dict=fuzz/dicts/$h.dict")
  "$bin/fuzz/${h}_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
    "${dict[@]}" "$dir/corpus" >"$dir/log" 2>&1
  rc=$?
  runs="$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$dir/log" | tail -1)"
  [ -n "$runs" ] || runs="$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$dir/log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *\([0-9]*\).*/\1/p' "$dir/log" | tail -1)"
  crashes=("$dir"/artifacts/*)
  if [ "$rc" -eq 0 ] && [ ! -e "${crashes[0]}" ]; then
    printf '%-16s %12s %10s  %s\n' "$h" "${runs:-?}" "${rate:-?}" ok
  else
    failed=$((failed + 1))
    printf '%-16s %12s %10s  %s\n' "$h" "${runs:-?}" "${rate:-?}" "FAILED (exit $rc)"
    for c in "${crashes[@]}"; do
      [ -e "$c" ] && echo "  crash input: $c"
    done
    echo "  log: $dir/log"
    grep -E "^(==[0-9]+==ERROR|SUMMARY|.*invariant failed|.*runtime error)" "$dir/log" | head -5 | sed 's/^/  /'
  fi
done

echo
if [ "$failed" -ne 0 ]; then
  echo "fuzz: $failed of ${#harnesses[@]} harnesses FAILED; inputs and logs kept in $work"
  echo "fuzz: fix the parser, then add the input to fuzz/regressions/<harness>/"
  exit 1
fi
rm -rf "$work"
echo "fuzz: ${#harnesses[@]} harnesses, ${seconds} s each, no crash ($((SECONDS - start)) s in all)"
