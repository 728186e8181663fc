#!/usr/bin/env bash
# PyTorch parity of every zoo model (parity.py), then the checks that the
# comparison catches what it should (parity_selftest.py). Needs Debian's
# python3-torch and python3-numpy under /usr/bin/python3: without them the
# test fails and says to run deploy/install-deps.sh (CI installs them).
#
#   parity_test.sh WORKER
set -uo pipefail
worker="$1"
dir="tests/parity"
examples="examples"
py=/usr/bin/python3
work="${TEST_TMPDIR:-$(mktemp -d)}"

if [[ ! -x "${py}" ]] || ! "${py}" -c 'import torch, numpy' 2>/dev/null; then
  echo "parity_test: FAILED: ${py} cannot import torch and numpy (Debian's" \
       "python3-torch and python3-numpy); run deploy/install-deps.sh as root" \
       "to install them"
  exit 1
fi

"${py}" "${dir}/parity.py" --worker="${worker}" --examples="${examples}" \
  --steps=3 --work="${work}/zoo" || exit 1
echo
"${py}" "${dir}/parity_selftest.py" "${worker}" "${examples}" "${work}/self"
