#!/usr/bin/env bash
# Runs every Lockstep test: the Bazel suite (GPU-tagged tests only where a
# GPU is present), then the README's demo as an end-to-end smoke test.
# Ends with one line: "N passed, N failed[, N skipped]" counting test cases.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

filters=()
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "test: GPU found: GPU tests included"
else
  echo "test: no GPU on this machine: tests tagged 'gpu' are skipped (CUDA code is still compiled)"
  filters+=(--test_tag_filters=-gpu)
fi

bazel test //... "${filters[@]}" --test_output=errors
bazel_rc=$?

testlogs="$(bazel info bazel-testlogs 2>/dev/null)"
read -r passed failed skipped < <(python3 - "$testlogs" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for xml in pathlib.Path(sys.argv[1]).rglob("test.xml"):
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError:
        failed += 1
        continue
    cases = root.iter("testcase")
    any_case = False
    for case in cases:
        any_case = True
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("result") == "skipped" or case.get("status") == "notrun" \
                or case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    if not any_case:
        # A test target without per-case results (e.g. a shell test).
        failed_attr = int(root.get("failures", "0") or 0) + int(root.get("errors", "0") or 0)
        if failed_attr:
            failed += 1
        else:
            passed += 1
print(passed, failed, skipped)
PY
)
if [ "$bazel_rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "test: bazel test failed (exit $bazel_rc) without a failing test case: a target did not build or timed out"
  failed=$((failed + 1))
fi

echo
echo "test: README demo (deploy/demo.sh)"
demo_dir="$(mktemp -d)"
out="$demo_dir/demo.out"
if LOCKSTEP_DEMO_DIR="$demo_dir" bash deploy/demo.sh >"$out" 2>&1 \
   && grep -q "^demo: [0-9]* workers connected" "$out" \
   && grep -q "REPRODUCIBLE at RUN_TO_RUN" "$out" \
   && grep -q "REPRODUCIBLE at CROSS_CLASS" "$out" \
   && grep -q "CROSS_CLASS  mlp" "$out" \
   && ! grep -q "CROSS_DEVICE" "$out" \
   && grep -q "first divergence: step 3, layer \"fc1\"" "$out" \
   && grep -q "lockstep check exited with 1" "$out" \
   && grep -q "fleet-5 .*OUTLIER .*quarantined" "$out" \
   && grep -q "no majority (a strict majority" "$out" \
   && grep -q "demo: done" "$out"; then
  echo "test: demo PASSED"
  passed=$((passed + 1))
else
  echo "test: demo FAILED; its output:"
  cat "$demo_dir/demo.out"
  failed=$((failed + 1))
fi
rm -rf "$demo_dir"

# Deployment: systemd units (systemd-analyze), the flags every deploy file
# passes, the container and Kubernetes files (offline schema checks) and
# the Slurm fleet-audit drill on a real local cluster (deploy/deploy_checks.sh
# prints one PASS/FAIL/SKIP line per check).
echo
echo "test: deployment checks (deploy/deploy_checks.sh)"
if bazel build //server:lockstep-coordinator //worker:lockstep-worker \
     //client:lockstep >/dev/null 2>&1 \
   && LOCKSTEP_BIN_DIR="$(bazel info bazel-bin 2>/dev/null)" \
      bash deploy/deploy_checks.sh; then
  echo "test: deployment checks PASSED"
  passed=$((passed + 1))
else
  echo "test: deployment checks FAILED"
  failed=$((failed + 1))
fi

# The dashboard in headless Chromium, /metrics and the scrape config through
# promtool (already run by `bazel test //...`, so cached here): says so
# when the tools are missing, since those tests then skip their checks.
echo
echo "test: dashboard and metrics (headless chromium, promtool)"
missing_tools=()
command -v chromium >/dev/null 2>&1 || missing_tools+=(chromium)
command -v promtool >/dev/null 2>&1 || missing_tools+=("promtool (package prometheus)")
if [ "${#missing_tools[@]}" -gt 0 ]; then
  echo "test: dashboard checks SKIPPED: ${missing_tools[*]} missing; deploy/install-deps.sh installs them"
  skipped=$((skipped + 1))
elif bazel test //tests/browser:dashboard_browser_test //server/http:http_api_e2e_test \
     //deploy/prometheus:prometheus_config_test --test_output=errors; then
  echo "test: dashboard and metrics PASSED (screenshots in $testlogs/tests/browser/dashboard_browser_test/test.outputs/outputs.zip)"
  passed=$((passed + 1))
else
  echo "test: dashboard and metrics FAILED"
  failed=$((failed + 1))
fi

# The bad-input suites again under AddressSanitizer and UBSan. Last, because
# the sanitizer build replaces the normal objects of what it rebuilds.
echo
echo "test: bad-input suites under AddressSanitizer/UBSan"
if bazel test --config=asan //model:bad_spec_test //model:spec_io_test \
     //worker/data:npy_test //worker/data:idx_test \
     //server:message_checks_test --test_output=errors; then
  echo "test: sanitizer suites PASSED"
  passed=$((passed + 1))
else
  echo "test: sanitizer suites FAILED"
  failed=$((failed + 1))
fi

# Clang's thread-safety analysis over every ABSL_GUARDED_BY in the
# coordinator, worker and client (warnings are errors). In an output base of
# its own, so the clang objects do not replace the gcc ones.
echo
echo "test: clang thread-safety analysis (bazel build --config=tsa)"
tsa_base="${XDG_CACHE_HOME:-$HOME/.cache}/lockstep-tsa"
if bazel --output_base="$tsa_base" build --config=tsa --define=cuda=off \
     //common/... //model/... //server/... //worker/... //client/...; then
  echo "test: thread-safety analysis PASSED"
  passed=$((passed + 1))
else
  echo "test: thread-safety analysis FAILED"
  failed=$((failed + 1))
fi
bazel --output_base="$tsa_base" shutdown >/dev/null 2>&1 || true

# libFuzzer on every parser of outside input (fuzz/, docs/fuzzing.md): a
# bounded run per harness from the checked-in corpus, in an output base of
# its own; every past crash is also replayed by //fuzz tests above.
echo
echo "test: libFuzzer harnesses (fuzz/run_fuzzers.sh, 8 s each)"
if bash fuzz/run_fuzzers.sh 8; then
  echo "test: fuzzing PASSED"
  passed=$((passed + 1))
else
  echo "test: fuzzing FAILED"
  failed=$((failed + 1))
fi

echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
