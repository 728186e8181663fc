# syntax=docker/dockerfile:1
# Lockstep GPU worker on NVIDIA's CUDA 13.0 + cuDNN 9 images (Ubuntu 24.04,
# whose abseil 20220623, protobuf 3.21.12 and gRPC 1.51.1 are the versions
# Debian 12 ships, so the build is the same as on the Debian build machine).
#
# Build from the repository root:
#   docker build -f deploy/container/worker-gpu.Dockerfile -t lockstep-worker-gpu .
# Run one container per GPU, each seeing only its GPU (NVIDIA Container
# Toolkit):
#   docker run -d --gpus '"device=0"' lockstep-worker-gpu \
#     --coordinator=coord-host:7070 --name=gpu-node-3-0
# The worker's device identity is its GPU's UUID, so each GPU is its own
# device in audits. The host driver must support CUDA 13.0 (R580 or newer).
#
# Bases: nvidia/cuda:${CUDA_TAG}-cudnn-devel-ubuntu24.04 to build and
# nvidia/cuda:${CUDA_TAG}-cudnn-runtime-ubuntu24.04 to run.
ARG CUDA_TAG=13.0.1

FROM nvidia/cuda:${CUDA_TAG}-cudnn-devel-ubuntu24.04 AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      bazel-bootstrap g++ python3 ca-certificates \
      libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev \
      libabsl-dev libsqlite3-dev libxxhash-dev libcpp-httplib-dev \
 && rm -rf /var/lib/apt/lists/*
# The build finds CUDA where nvcc, include/cudnn.h and lib64 sit under one
# root (LOCKSTEP_CUDA_PATH). NVIDIA's images keep cuDNN under /usr, so one
# root is assembled from links.
RUN mkdir -p /opt/lockstep-cuda/include /opt/lockstep-cuda/lib64 \
 && ln -s /usr/local/cuda/bin /opt/lockstep-cuda/bin \
 && ln -s /usr/local/cuda/include/* /opt/lockstep-cuda/include/ \
 && ln -s /usr/local/cuda/lib64/* /opt/lockstep-cuda/lib64/ \
 && ln -sf /usr/include/x86_64-linux-gnu/cudnn*.h /usr/include/cudnn*.h /opt/lockstep-cuda/include/ \
 && ln -sf /usr/lib/x86_64-linux-gnu/libcudnn* /opt/lockstep-cuda/lib64/
ENV LOCKSTEP_CUDA_PATH=/opt/lockstep-cuda
WORKDIR /src
COPY . .
RUN bazel build //worker:lockstep-worker //client:lockstep \
 && mkdir -p /out/bin \
 && cp -L bazel-bin/worker/lockstep-worker bazel-bin/client/lockstep /out/bin/ \
 && for b in /out/bin/*; do ldd "$b"; done \
      | awk '/=> \//{print $3}' | grep -v -e cuda -e cudnn -e cublas \
      | sort -u | xargs -r readlink -f \
      | xargs -r dpkg -S | cut -d: -f1 | sort -u >/out/runtime-packages \
 && cat /out/runtime-packages

FROM nvidia/cuda:${CUDA_TAG}-cudnn-runtime-ubuntu24.04
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/runtime-packages /tmp/runtime-packages
RUN apt-get update \
 && xargs -a /tmp/runtime-packages apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin lockstep
COPY --from=build /out/bin/ /usr/local/bin/
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER lockstep
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/lockstep-worker", "daemon"]
# With TLS and tokens (docs/security.md): --ca, --cert, --key and/or
# --token_file, with the files mounted read-only under /etc/lockstep/tls.
CMD ["--coordinator=coordinator:7070"]
