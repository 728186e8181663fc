#!/usr/bin/env bash
# promtool check config on the scrape configuration example.
set -euo pipefail
config="$1"
if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIPPED: promtool is missing (Debian package prometheus, installed by deploy/install-deps.sh); $config was not checked"
  exit 0
fi
promtool check config "$config"
