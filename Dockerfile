# nodefence's image for those with a container engine and a registry. (Without one,
# image/build makes the same image here with buildah: see README, "Building the image".)
#
#   docker build -t REGISTRY/nodefence:0.1.0 .
#   docker build --target fence-agents -t REGISTRY/nodefence:0.1.0-fence-agents .

FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# --no-default-features: without the `demo` feature and its mocks (image/build says why).
RUN cargo build --profile dist --locked --no-default-features -p nodefence --bin nodefence \
 && install -m 0755 target/dist/nodefence /usr/local/bin/nodefence

# The default: glibc, the CA bundle, a non-root user (65532) and nothing else.
FROM gcr.io/distroless/cc-debian12:nonroot AS default
COPY --from=build /usr/local/bin/nodefence /usr/local/bin/nodefence
USER 65532:65532
EXPOSE 8081 8443
ENTRYPOINT ["/usr/local/bin/nodefence"]
CMD ["--help"]
LABEL org.opencontainers.image.title="nodefence" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"

# driver = "exec": Debian's ClusterLabs fence agents (/usr/sbin/fence_*) beside it.
FROM docker.io/library/debian:bookworm-slim AS fence-agents
RUN apt-get update \
 && apt-get install -y --no-install-recommends fence-agents ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --home-dir /home/nonroot --create-home --shell /usr/sbin/nologin nonroot
COPY --from=build /usr/local/bin/nodefence /usr/local/bin/nodefence
USER 65532:65532
EXPOSE 8081 8443
ENTRYPOINT ["/usr/local/bin/nodefence"]
CMD ["--help"]
LABEL org.opencontainers.image.title="nodefence (with fence agents)" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"

# `docker build .` without --target: the default image.
FROM default
