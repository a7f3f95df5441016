# syntax=docker/dockerfile:1
# tunnelgate container image: the optimised binary (cargo profile `dist`, whole-program
# optimisation; its build takes about 15 minutes on 2 cores) on distroless (glibc), non-root.
#
#   docker build -t tunnelgate:0.1.0 .
#   docker run --rm -v "$PWD/config.toml:/etc/tunnelgate/config.toml:ro" \
#     -e CONTROL_PLANE_API_KEY -p 9464:9464 tunnelgate:0.1.0
#
# In a container, set ops.listen = "0.0.0.0:9464" and ops.allow_remote = true in the
# config so that probes and Prometheus reach the ops listener (deploy/kubernetes does).
# Strict mode needs a writable, persistent directory for strict.latch_file: mount a
# volume at /var/lib/tunnelgate (owned by uid 65532); the root filesystem can stay
# read-only. The delivery-receipt journal (receipts.path) lives there too by default:
# without such a volume its lines are dropped and counted, commands are not affected.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# rust-toolchain.toml pins the exact toolchain; rustup installs it if the image's differs.
COPY . .
# The target folder lives in a cache mount, so the binary is copied out in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked --bin tunnelgate \
    && install -D -m 0755 target/dist/tunnelgate /out/tunnelgate

# glibc and libgcc, nothing else; no shell. The :nonroot tag runs as uid/gid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/tunnelgate /usr/local/bin/tunnelgate
USER 65532:65532
# The ops listener: /livez /readyz /status /metrics.
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/tunnelgate"]
CMD ["run", "--config", "/etc/tunnelgate/config.toml"]
