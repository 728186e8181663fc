#!/usr/bin/env bash
# Installs what Lockstep needs to build, test and run on Debian 12, as root.
# Idempotent: packages already present are left alone, and apt-get runs only
# when something is missing. The CUDA 13 toolkit and cuDNN 9 are not Debian
# packages: where they exist under /usr/local/cuda (or $LOCKSTEP_CUDA_PATH)
# the GPU code is compiled, elsewhere it builds as "built without CUDA".
set -euo pipefail

PACKAGES=(
  bazel-bootstrap          # Bazel 4.2.3
  g++                      # C++17 compiler
  clang                    # thread-safety analysis (bazel build --config=tsa)
  python3                  # test summaries
  libgrpc++-dev            # gRPC 1.51 (+ reflection)
  protobuf-compiler-grpc   # grpc_cpp_plugin
  protobuf-compiler        # protoc 3.21
  libprotobuf-dev
  libabsl-dev              # Abseil 20220623
  libsqlite3-dev           # SQLite 3.40
  libgtest-dev             # GoogleTest 1.12
  libgmock-dev
  libbenchmark-dev         # Google Benchmark 1.7
  libxxhash-dev            # xxHash 0.8 (fingerprints)
  libcpp-httplib-dev       # HTTP dashboard and metrics
  libonnx-dev              # onnx.proto: `lockstep import` of ONNX models
  libssl-dev               # libcrypto: SHA-256 of bearer tokens (libgrpc links it)
  openssl                  # lockstep-coordinator certs: a test CA and certificates
  prometheus               # promtool: checks /metrics and the scrape config
  chromium                 # headless browser tests of the dashboard
  libopenblas-dev          # OpenBLAS sgemm: the CPU benchmark's baseline
  libclang-rt-14-dev       # libFuzzer runtime (clang -fsanitize=fuzzer)
  slurm-wlm                # the Slurm fleet-audit drill on a local cluster
  munge                    # Slurm's authentication daemon
  python3-kubernetes       # offline validation of the Kubernetes manifests
  python3-yaml             # reads the manifests and compose file
  python3-torch            # PyTorch 1.13: the float64 parity reference (tests/parity), ONNX test exports (tests/onnx)
  python3-numpy            # reads the .npy tensor dumps in tests/parity
)

names=()
for entry in "${PACKAGES[@]}"; do names+=("${entry%% *}"); done

missing=()
for p in "${names[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run this script as root (or with sudo) to install them" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cuda="${LOCKSTEP_CUDA_PATH:-${CUDA_PATH:-/usr/local/cuda}}"
if [ -x "$cuda/bin/nvcc" ] && [ -f "$cuda/include/cudnn.h" ]; then
  echo "install-deps: CUDA toolkit and cuDNN found under $cuda: GPU code will be compiled"
else
  echo "install-deps: no CUDA toolkit with cuDNN under $cuda: GPU code builds as 'built without CUDA'"
fi
echo "install-deps: all dependencies present"
