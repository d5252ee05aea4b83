# A container image of the broker (docs/operations.md, "Containers").
#
#   docker build -t queen-go --build-arg VERSION=$(git describe --tags --always) \
#       --build-arg COMMIT=$(git rev-parse HEAD) .
#   docker run -p 6632:6632 -v queen-wal:/var/lib/queen/buffers \
#       -e QUEEN_PG_URL=postgres://user:pass@db:5432/queen queen-go
#
# Stage 1 builds a static binary; stage 2 is distroless (no shell, no
# package manager) and runs it as the unprivileged user "nonroot".
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/queen ./cmd/queen \
 && mkdir -p /out/buffers

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/queen /usr/local/bin/queen
# The broker directory (WAL and broker.id) must survive the container: mount
# a volume here. It is owned by nonroot (65532) so the broker can write it.
COPY --from=build --chown=65532:65532 /out/buffers /var/lib/queen/buffers
ENV FILE_BUFFER_DIR=/var/lib/queen/buffers
VOLUME ["/var/lib/queen/buffers"]
USER nonroot:nonroot
EXPOSE 6632
# SIGTERM (docker stop) shuts down gracefully: give it more than 30 s
# (docker stop -t 40) so in-flight requests finish and the WAL is closed.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/queen"]
