#!/usr/bin/env bash
# Installs what deploy/cross/aarch64.sh needs on Debian 12 (amd64), as root:
# the aarch64 cross compiler, qemu-user, and the arm64 builds of the
# libraries lockstep-worker links (multiarch, beside the amd64 ones that
# deploy/install-deps.sh installs). Idempotent.
#
# Multiarch needs the amd64 and arm64 copies of each shared package at the
# same version, so apt may upgrade a few amd64 packages (libssl3, libkrb5,
# libcom-err2, ...) to the versions the arm64 ones come in.
set -euo pipefail

PACKAGES=(
  g++-aarch64-linux-gnu    # gcc 12 cross compiler and the arm64 libc/libstdc++
  qemu-user-static         # qemu-aarch64-static runs the binaries
  libprotobuf-dev:arm64    # protobuf 3.21 (same version as the amd64 protoc)
  libabsl-dev:arm64        # Abseil 20220623
  libxxhash-dev:arm64      # xxHash 0.8
  libgrpc++-dev:arm64      # gRPC 1.51 (the daemon), with its static deps
)

missing=()
for p in "${PACKAGES[@]%% *}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "cross install-deps: all present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "cross install-deps: missing ${missing[*]}; run this script as root" >&2
  exit 1
fi
echo "cross install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "cross install-deps: done"
