#!/usr/bin/env bash
# Validates the Kubernetes manifests beside this file (validate_manifests.py).
set -uo pipefail
dir="deploy/k8s"
if [[ ! -x /usr/bin/python3 ]]; then
  echo "SKIPPED: /usr/bin/python3 is missing; the manifests were not checked"
  exit 0
fi
/usr/bin/python3 "${dir}/validate_manifests.py" "${dir}"
rc=$?
if [[ "${rc}" -eq 77 ]]; then
  echo "SKIPPED: python3-kubernetes is missing (installed by deploy/install-deps.sh); the manifests were not checked"
  exit 0
fi
exit "${rc}"
