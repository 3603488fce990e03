# Writ in a container: a release build on Debian, run as an unprivileged user.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin writ

FROM debian:bookworm-slim
RUN useradd --system --home /var/lib/writ --create-home writ
COPY --from=build /src/target/release/writ /usr/local/bin/writ
USER writ
WORKDIR /var/lib/writ
ENV WRIT_BIND=0.0.0.0:3000
EXPOSE 3000
ENTRYPOINT ["writ"]
CMD ["serve"]
