#!/usr/bin/env bash
# Checks the systemd units offline with `systemd-analyze verify` and
# `systemd-analyze security --offline`, in a scratch root that holds the
# units, the built binaries at their ExecStart paths and a copy of the
# system's own units (for sysinit.target and friends). A unit passes only if
# verify exits 0 and prints nothing: unknown keys and unparsable values are
# warnings that verify does not count as errors.
#
# It then breaks a copy of the coordinator unit on purpose (a misspelled
# key) and requires the same check to reject it, so a check that cannot
# fail is caught.
#
# Usage: verify_units.sh [BIN_DIR]   (a bazel-bin tree; default
#        $LOCKSTEP_BIN_DIR, else `bazel info bazel-bin`)
# Exit: 0 pass, 1 fail, 77 skipped (systemd-analyze missing).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:-${LOCKSTEP_BIN_DIR:-}}"
if [[ -z "${bin}" ]]; then
  bin="$(cd "${here}/../.." && bazel info bazel-bin 2>/dev/null)"
fi

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "systemd: SKIP: systemd-analyze not found (Debian package systemd)"
  exit 77
fi
system_units=""
for d in /usr/lib/systemd/system /lib/systemd/system; do
  if [[ -f "${d}/sysinit.target" ]]; then system_units="${d}"; break; fi
done
if [[ -z "${system_units}" ]]; then
  echo "systemd: SKIP: no system unit directory with sysinit.target"
  exit 77
fi

scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT
root="${scratch}/root"
mkdir -p "${root}/etc/systemd/system" "${root}/usr/local/bin" \
  "${root}/usr/lib/systemd"
cp -a "${system_units}" "${root}/usr/lib/systemd/system"
for b in server/lockstep-coordinator worker/lockstep-worker client/lockstep; do
  if [[ ! -x "${bin}/${b}" ]]; then
    echo "systemd: FAIL: ${bin}/${b} is not built" >&2
    exit 1
  fi
  cp "${bin}/${b}" "${root}/usr/local/bin/"
done
cp "${here}"/*.service "${root}/etc/systemd/system/"

# verify_unit UNIT: 0 when verify accepts UNIT silently; prints what it said.
verify_unit() {
  local out rc=0
  out="$(systemd-analyze verify --root="${root}" "$1" 2>&1)" || rc=$?
  if [[ "${rc}" -ne 0 || -n "${out}" ]]; then
    printf '%s\n' "${out}" | sed "s|${root}||g; s|^|  |"
    return 1
  fi
}

failed=0
# The template is checked through instances: a GPU index and a name.
for unit in lockstep-coordinator.service lockstep-worker@0.service \
    lockstep-worker@cpu.service; do
  if verify_unit "${unit}"; then
    echo "systemd: ${unit}: verify ok"
  else
    echo "systemd: ${unit}: verify FAILED"
    failed=1
  fi
  # The hardening must keep its grade: systemd rates exposure 0 (locked
  # down) to 10 (unprotected); the coordinator rates 1.5, the worker 1.7.
  if ! out="$(systemd-analyze security --offline=yes --root="${root}" \
      --threshold=30 "${unit}" 2>&1)"; then
    printf '%s\n' "${out}" | tail -n 3
    echo "systemd: ${unit}: exposure above 3.0"
    failed=1
  else
    echo "systemd: ${unit}: $(printf '%s\n' "${out}" | grep -o 'exposure level.*')"
  fi
done

# The negative control: a misspelled key must fail the check.
sed 's/^ProtectSystem=strict/ProtectSytem=strict/' \
  "${here}/lockstep-coordinator.service" \
  >"${root}/etc/systemd/system/lockstep-broken.service"
if verify_unit lockstep-broken.service >/dev/null; then
  echo "systemd: the check accepted a unit with a misspelled key"
  failed=1
else
  echo "systemd: a unit with a misspelled key is rejected (as it must be)"
fi

exit "${failed}"
