#!/usr/bin/env bash
# Start a throwaway PostgreSQL for the accounting tests (package accounting):
# Debian's postgresql binaries, a fresh cluster in $BERTH_PG_DIR, listening on
# 127.0.0.1:$BERTH_PG_PORT only, trust authentication, fsync off (test data).
# PostgreSQL will not run as root: as root (CI) every server command runs as
# the `postgres` system user (created if missing); otherwise as the caller.
# Writes $BERTH_PG_DIR/env, which exports BERTH_POSTGRES_URL. Rerunnable: it
# stops an earlier instance first. Stop it with hack/pg-down.sh.
set -euo pipefail
BERTH_PG_DIR=${BERTH_PG_DIR:-/tmp/berth-pg}
BERTH_PG_PORT=${BERTH_PG_PORT:-55433}
BERTH_PG_DB=${BERTH_PG_DB:-berth}
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/pg-down.sh" >/dev/null 2>&1 || true

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "[pg] PostgreSQL is not installed (apt-get install postgresql, as root)" >&2; exit 1
  fi
  # Install without starting Debian's own cluster service.
  export DEBIAN_FRONTEND=noninteractive
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
  apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  rm -f /usr/sbin/policy-rc.d
  bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi

mkdir -p "$BERTH_PG_DIR"
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin postgres
  chown postgres: "$BERTH_PG_DIR"
  pg() { runuser -u postgres -- "$@"; }
else
  pg() { "$@"; }
fi
chmod 700 "$BERTH_PG_DIR"
pg "$bindir/initdb" -D "$BERTH_PG_DIR/data" -U postgres -A trust -E UTF8 --no-locale >"$BERTH_PG_DIR/initdb.log" 2>&1 \
  || { tail -5 "$BERTH_PG_DIR/initdb.log" >&2; exit 1; }
# The Unix socket goes to the state directory, not /var/run/postgresql.
pg "$bindir/pg_ctl" -D "$BERTH_PG_DIR/data" -l "$BERTH_PG_DIR/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $BERTH_PG_PORT -k $BERTH_PG_DIR -c fsync=off -c full_page_writes=off -c shared_buffers=32MB -c max_connections=40" \
  start >/dev/null || { tail -20 "$BERTH_PG_DIR/server.log" >&2; exit 1; }
pg "$bindir/createdb" -h 127.0.0.1 -p "$BERTH_PG_PORT" -U postgres "$BERTH_PG_DB"
url="postgres://postgres@127.0.0.1:$BERTH_PG_PORT/$BERTH_PG_DB?sslmode=disable"
cat > "$BERTH_PG_DIR/env" <<ENV
export BERTH_POSTGRES_URL='$url'
ENV
echo "[pg] up: $url (source $BERTH_PG_DIR/env)"
