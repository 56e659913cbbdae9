# syntax=docker/dockerfile:1
#
# lite-node, as operators run it:
#   docker build -t lite-node .
#   docker run -d --env-file .env -v lite-node-data:/data -p 127.0.0.1:8002:8002 --restart unless-stopped lite-node
# (docker-compose.yaml adds the protocol's local collector.)
#
# The runtime image keeps a minimal Rust toolchain: the node builds the data
# market's compute package (pinned by SNAPSHOTTER_COMPUTE_REPO{,_BRANCH,_COMMIT})
# against its own embedded plugin-api source, once per commit; the result is
# cached on the /data volume, so a restart loads it in milliseconds.

ARG RUST_IMAGE=rust:1.95.0-slim-bookworm

# Two ways to the same image, each a stage name buildah and BuildKit both
# resolve (a FROM naming a stage through an ARG is not one buildah does):
#   runtime           (the last stage: what `docker build .` and
#                     `podman build .` give) compiles lite-node in `builder`;
#   runtime-prebuilt  (`--target runtime-prebuilt`) takes a binary built
#                     beside, at `.prebuilt/lite-node` in the build context:
#                     what the test suite's container drill builds, around the
#                     binary it already built.
# Both are `base` with the binary and the compute package's crates added.

FROM ${RUST_IMAGE} AS builder
RUN apt-get update \
 && apt-get install -y --no-install-recommends pkg-config libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY plugin-api plugin-api
COPY computes computes
# The bundled compute package's crates, so building it needs no network
# (before the runtime's sources: a layer cached while its lock file stays).
RUN CARGO_HOME=/out/cargo-home cargo fetch --locked --manifest-path computes/Cargo.toml
COPY Cargo.toml Cargo.lock rustfmt.toml ./
COPY proto proto
COPY protocol protocol
COPY contracts/out contracts/out
COPY validator validator
COPY runtime runtime
COPY tests tests
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p lite-node \
 && install -D target/release/lite-node /out/lite-node

FROM ${RUST_IMAGE} AS prebuilt
WORKDIR /src
COPY plugin-api plugin-api
COPY computes computes
# Before the binary, which changes with every build: the crates' layer is
# the builder's cache while the compute package's lock file stays the same.
RUN CARGO_HOME=/out/cargo-home cargo fetch --locked --manifest-path computes/Cargo.toml
COPY .prebuilt/lite-node /out/lite-node

FROM ${RUST_IMAGE} AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git libssl3 curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --create-home --home-dir /home/lite --shell /usr/sbin/nologin lite \
 && mkdir -p /data \
 && chown lite:lite /data
WORKDIR /app
COPY --chown=lite:lite init.sh projects.json env.example ./
COPY --chown=lite:lite computes computes
ENV LITE_NODE_DATA_DIR=/data \
    PROJECTS_CONFIG=/app/projects.json \
    CARGO_HOME=/home/lite/.cargo \
    STATUS_PORT=8002 \
    STATUS_HOST=0.0.0.0 \
    LITE_NODE_STOP_GRACE_SECS=8
# A stop takes at most LITE_NODE_STOP_GRACE_SECS (+ well under a second):
# 8 s fits `docker stop`'s default 10 s; docker-compose.yaml gives 60 s and
# sets 45 s (keep it under the stop timeout you give the container). An epoch still in flight then is computed again after the restart.
USER lite
VOLUME ["/data"]
EXPOSE 8002
# Healthy only while epochs are processed; the first start may build the
# compute package for several minutes.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15m --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${STATUS_PORT}/health" >/dev/null || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["/app/init.sh"]

FROM base AS runtime-prebuilt
COPY --from=prebuilt /out/lite-node /usr/local/bin/lite-node
COPY --from=prebuilt --chown=lite:lite /out/cargo-home /home/lite/.cargo

FROM base AS runtime
COPY --from=builder /out/lite-node /usr/local/bin/lite-node
COPY --from=builder --chown=lite:lite /out/cargo-home /home/lite/.cargo
