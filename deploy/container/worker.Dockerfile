# syntax=docker/dockerfile:1
# Lockstep CPU worker on Debian 12.
#
# Build from the repository root:
#   docker build -f deploy/container/worker.Dockerfile -t lockstep-worker .
# Run one per device to audit, each with its own name:
#   docker run -d lockstep-worker --coordinator=coord-host:7070 --name=cpu-node-1
#
# Device identity: a container has no /etc/machine-id of its own, so the
# worker falls back to the host's boot id; containers on one host count as
# one device, as they should. Mount the host's file
# (-v /etc/machine-id:/etc/machine-id:ro) or pass --machine_id_file to make
# it explicit.

FROM debian:12 AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      bazel-bootstrap g++ python3 ca-certificates \
      libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev \
      libabsl-dev libsqlite3-dev libxxhash-dev libcpp-httplib-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN bazel build --define=cuda=off //worker:lockstep-worker //client:lockstep \
 && mkdir -p /out/bin \
 && cp -L bazel-bin/worker/lockstep-worker bazel-bin/client/lockstep /out/bin/ \
 && for b in /out/bin/*; do ldd "$b"; done \
      | awk '/=> \//{print $3}' | sort -u | xargs -r readlink -f \
      | xargs -r dpkg -S | cut -d: -f1 | sort -u >/out/runtime-packages \
 && cat /out/runtime-packages

FROM debian:12-slim
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/runtime-packages /tmp/runtime-packages
RUN apt-get update \
 && xargs -a /tmp/runtime-packages apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin lockstep
COPY --from=build /out/bin/ /usr/local/bin/
USER lockstep
# SIGTERM stops the worker; its runs are handed elsewhere when their lease
# ends. `lockstep workers drain NAME` first to stop without losing work.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/lockstep-worker", "daemon"]
# With TLS and tokens (docs/security.md): --ca, --cert, --key and/or
# --token_file, with the files mounted read-only under /etc/lockstep/tls.
CMD ["--coordinator=coordinator:7070"]
