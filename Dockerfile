# Switchyard's container image: docs/src/operations/container.md.
#
#   docker build -t switchyard .
#   docker run -p 8080:8080 -e OPENAI_API_KEY switchyard
#
# Two stages: the release binary is built in the Rust image, then copied with its config onto
# a small runtime base (glibc, libgcc and CA roots; no shell, no package manager).
#
# Build arguments:
#   RUST_IMAGE     the builder stage's base (Rust 1.94.1 or later, as Cargo.toml's rust-version; the
#                  same Debian as the runtime)
#   RUNTIME_IMAGE  the runtime base; `scratch` works when the binary's libraries come with it
#   BINARY         `source` builds from this directory; `prebuilt` takes a root file system
#                  from the context's rootfs/ and state/ instead (the binary, the libraries
#                  `ldd` names, CA roots, the config; the data directory), as
#                  scripts/container-test stages it on machines that reach no image registry
#   VERSION, COMMIT  the OCI labels org.opencontainers.image.version and .revision
ARG RUST_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12
ARG BINARY=source

FROM ${RUST_IMAGE} AS source
WORKDIR /src
COPY . .
# /rootfs is copied onto the runtime base as it is, owned by root; /state holds the empty
# data directory, given to the gateway's user as it is copied.
RUN cargo build --release --locked \
 && install -D -m 0755 target/release/switchyard /rootfs/usr/local/bin/switchyard \
 && install -D -m 0644 deploy/container/switchyard.toml /rootfs/etc/switchyard/switchyard.toml \
 && install -d -m 0755 /rootfs/var/lib \
 && install -d -m 0700 /state/switchyard

FROM scratch AS prebuilt
COPY rootfs/ /rootfs/
COPY state/ /state/

FROM ${BINARY} AS binary

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="switchyard" \
      org.opencontainers.image.description="A self-hosted LLM gateway: fallback chains, exact limits, live key rotation" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
# Everything root's, so the gateway reads its config but cannot change it; only the data
# directory is the service user's.
COPY --from=binary /rootfs/ /
COPY --from=binary --chown=65532:65532 /state/ /var/lib/
# 65532 is distroless's `nonroot`; numeric, so it holds on a base with no passwd entry too.
USER 65532:65532
WORKDIR /var/lib/switchyard
VOLUME ["/var/lib/switchyard"]
ENV SWITCHYARD_LOG=info
# The client API, and the admin API, metrics and dashboard ([server] admin_listen).
EXPOSE 8080 8081
# SIGTERM drains: /readyz answers 503 for [server] drain_delay (5 s) while the listener still
# accepts, then requests in flight, streams included, get up to shutdown_grace (10 min) to
# finish before the request log is flushed and the process exits. Give `docker stop -t`,
# compose's stop_grace_period or Kubernetes' terminationGracePeriodSeconds that much.
STOPSIGNAL SIGTERM
# The image has no curl: the binary asks its own /readyz (exit 0 on a 2xx).
HEALTHCHECK --interval=10s --timeout=6s --start-period=15s --retries=3 \
  CMD ["/usr/local/bin/switchyard", "health", "--url", "http://127.0.0.1:8080/readyz", "--timeout", "5"]
ENTRYPOINT ["/usr/local/bin/switchyard"]
CMD ["serve", "--config", "/etc/switchyard/switchyard.toml"]
