# syntax=docker/dockerfile:1
# Lockstep coordinator and the `lockstep` CLI on Debian 12.
#
# Build from the repository root:
#   docker build -f deploy/container/coordinator.Dockerfile -t lockstep-coordinator .
# Run (the database lives in the volume at /var/lib/lockstep):
#   docker run -d -p 7070:7070 -p 127.0.0.1:8080:8080 \
#     -v lockstep-db:/var/lib/lockstep lockstep-coordinator
#
# The build stage compiles with Bazel against Debian's packages, exactly as
# deploy/install-deps.sh sets up a build machine (CPU only: the coordinator
# and the CLI never touch a GPU). It also records which Debian packages own
# the shared libraries the binaries link, and the runtime stage installs
# those, so the two lists cannot drift apart.

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
RUN bazel build --define=cuda=off \
      //server:lockstep-coordinator //client:lockstep \
 && mkdir -p /out/bin \
 && cp -L bazel-bin/server/lockstep-coordinator bazel-bin/client/lockstep /out/bin/ \
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
 && useradd --system --uid 10001 --home-dir /var/lib/lockstep --shell /usr/sbin/nologin lockstep \
 && install -d -o lockstep -g lockstep -m 0750 /var/lib/lockstep
COPY --from=build /out/bin/ /usr/local/bin/
COPY examples/ /usr/local/share/lockstep/examples/
USER lockstep
WORKDIR /var/lib/lockstep
VOLUME ["/var/lib/lockstep"]
# 7070: gRPC (clients and workers). 8080: dashboard, /metrics, /healthz,
# /readyz; it has no authentication, so publish it to trusted networks only.
EXPOSE 7070 8080
# SIGTERM drains the coordinator: streams get 2 s, then the store closes.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/lockstep", "--coordinator=127.0.0.1:7070", "--timeout_ms=3000", "workers"]
ENTRYPOINT ["/usr/local/bin/lockstep-coordinator"]
# Plaintext without tokens, explicitly allowed (a trusted network only; see
# docs/security.md for --tls_cert, --tls_key, --worker_ca and tokens).
CMD ["--force_plaintext", "--auth=none", "--listen=0.0.0.0:7070", "--db=/var/lib/lockstep/lockstep.db", \
     "--zoo_dir=/usr/local/share/lockstep/examples", "--http_listen=0.0.0.0:8080"]
