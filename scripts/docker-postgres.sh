#!/usr/bin/env bash
# compose's postgres image without a registry: when postgres:16-alpine (compose.yaml's postgres
# service) is neither present nor pullable (an air-gapped machine, no Docker Hub), build a
# stand-in of the same name on the Dockerfile's Debian base (python:3.11-slim, or the stand-in
# scripts/docker-base.sh makes of it) with Debian's postgresql package (15 on bookworm) and an
# entrypoint that does what the official image's does for compose:
#   - POSTGRES_USER (default postgres) is the superuser, with POSTGRES_PASSWORD (required unless
#     POSTGRES_HOST_AUTH_METHOD=trust); POSTGRES_DB (default: the user) is created;
#   - the cluster lives in PGDATA=/var/lib/postgresql/data (the volume), made on first start
#     only: a volume that holds one is started as it is; POSTGRES_INITDB_ARGS go to initdb;
#   - local socket connections are trusted (pg_isready, `docker exec ... psql`), others need
#     the password (scram-sha-256); it listens on every address, port 5432; runs as `postgres`;
#     stops on SIGINT (fast shutdown), as the official image's STOPSIGNAL.
# Not the official image: PostgreSQL 15, not 16, so a volume initialised by one is not started by
# the other; no /docker-entrypoint-initdb.d scripts.
#
#   bash scripts/docker-postgres.sh           # no-op when the image is present or can be pulled
#   FORCE=1 bash scripts/docker-postgres.sh   # build the stand-in anyway (replaces the tag)
#
# Needs a running Docker engine and the Debian archive (apt inside the build); builds the base
# first with scripts/docker-base.sh when it is missing. Env: IMAGE (default: compose.yaml's).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-$(awk '$1 == "image:" && $2 ~ /^postgres:/ {print $2; exit}' compose.yaml)}
BASE=$(awk '/^FROM /{print $2; exit}' Dockerfile)

if [ -z "${FORCE:-}" ]; then
  if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "$IMAGE is present"; exit 0
  fi
  if timeout 120 docker pull -q "$IMAGE" >/dev/null 2>&1; then
    echo "$IMAGE pulled"; exit 0
  fi
  echo "$IMAGE cannot be pulled: building a stand-in on $BASE with Debian's postgresql"
fi
docker image inspect "$BASE" >/dev/null 2>&1 || bash scripts/docker-base.sh

ctx=$(mktemp -d /var/tmp/quiver-postgres.XXXXXX)
trap 'rm -rf "$ctx"' EXIT

cat >"$ctx/docker-entrypoint.sh" <<'EOF'
#!/bin/bash
# The official postgres image's contract, for compose (scripts/docker-postgres.sh).
set -euo pipefail
if [ $# -eq 0 ] || [ "${1:0:1}" = "-" ]; then set -- postgres "$@"; fi   # `command: ["-c", "x=y"]` are server options
if [ "$1" != "postgres" ]; then exec "$@"; fi

if [ "$(id -u)" = "0" ]; then   # a fresh volume is root's: hand it over, then drop root
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  user=${POSTGRES_USER:-postgres}
  db=${POSTGRES_DB:-$user}
  auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != "trust" ]; then
    echo "error: the database is uninitialized and POSTGRES_PASSWORD is not set" \
         "(or set POSTGRES_HOST_AUTH_METHOD=trust to allow every connection without one)" >&2
    exit 1
  fi
  echo "initialising $PGDATA: superuser $user, database $db"
  # shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS are words, as in the official image
  initdb -D "$PGDATA" --username="$user" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") \
    -E UTF8 --auth-local=trust --auth-host="$auth" ${POSTGRES_INITDB_ARGS:-} >/dev/null
  echo "host all all all $auth" >>"$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.auto.conf"
  if [ "$db" != "postgres" ]; then   # single-user mode: no server to wait for, no port open meanwhile
    printf 'CREATE DATABASE "%s"\n' "${db//\"/\"\"}" | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
fi
exec "$@"
EOF

cat >"$ctx/Dockerfile" <<EOF
FROM $BASE
# no cluster from the package: the entrypoint makes one in the volume on first start
RUN set -eux; export DEBIAN_FRONTEND=noninteractive; apt-get update; \\
    apt-get install -y --no-install-recommends postgresql-common; \\
    sed -ri 's/#(create_main_cluster) .*\$/\\1 = false/' /etc/postgresql-common/createcluster.conf; \\
    apt-get install -y --no-install-recommends postgresql; \\
    rm -rf /var/lib/apt/lists/*; \\
    ln -s /usr/lib/postgresql/*/bin /usr/lib/postgresql/bin; \\
    mkdir -p /var/run/postgresql /var/lib/postgresql/data; \\
    chown -R postgres:postgres /var/run/postgresql /var/lib/postgresql; chmod 3777 /var/run/postgresql
ENV PATH=/usr/lib/postgresql/bin:\$PATH PGDATA=/var/lib/postgresql/data LANG=C.UTF-8
COPY docker-entrypoint.sh /usr/local/bin/
RUN chmod 755 /usr/local/bin/docker-entrypoint.sh
VOLUME /var/lib/postgresql/data
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
EOF

old=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
docker build -q --label "org.quiver.stand-in=scripts/docker-postgres.sh" -t "$IMAGE" "$ctx" >/dev/null
new=$(docker image inspect -f '{{.Id}}' "$IMAGE")
[ -z "$old" ] || [ "$old" = "$new" ] || docker rmi "$old" >/dev/null 2>&1 || true  # the replaced stand-in
echo "$IMAGE built: $(docker run --rm --entrypoint postgres "$IMAGE" --version)," \
     "$(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}')"
