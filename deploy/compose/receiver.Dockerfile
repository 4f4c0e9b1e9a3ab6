# deploy/compose/receiver.Dockerfile — the example inbox receiver of the local
# development stack (deploy/docker-compose.yml): docs/examples/python/inbox_receiver.py
# with Debian's psycopg 3, and schema/inbox.sql, which it installs in its own
# database at start (--install, idempotent).
#
# The build context is the repository root, as for deploy/Dockerfile:
#
#   docker build -f deploy/compose/receiver.Dockerfile -t outbox-relay-example-receiver:local .
#
# (receiver.Dockerfile.dockerignore, beside this file, keeps the context to the
# two files it copies where the builder is BuildKit.)
FROM debian:bookworm-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-psycopg \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 receiver \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin receiver

COPY docs/examples/python/inbox_receiver.py /app/inbox_receiver.py
COPY schema/inbox.sql /app/inbox.sql

USER 10001:10001
EXPOSE 8080
# It stops on SIGTERM (PID 1 included) and prints "listening 0.0.0.0:8080" once bound.
ENTRYPOINT ["python3", "/app/inbox_receiver.py"]
CMD ["--listen", "0.0.0.0:8080", "--install", "/app/inbox.sql"]
