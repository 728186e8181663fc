#!/usr/bin/env bash
# Checks compose.yaml and the Dockerfiles beside this file
# (check_container.py), with the repository as the build context.
set -uo pipefail
if ! /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
  echo "SKIPPED: python3-yaml is missing (installed by deploy/install-deps.sh); the container files were not checked"
  exit 0
fi
exec /usr/bin/python3 deploy/container/check_container.py deploy/container
