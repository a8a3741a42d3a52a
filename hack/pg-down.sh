#!/usr/bin/env bash
# Stop the PostgreSQL that hack/pg-up.sh started and remove its state.
set -u
BERTH_PG_DIR=${BERTH_PG_DIR:-/tmp/berth-pg}
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -f "$BERTH_PG_DIR/data/postmaster.pid" ] && [ -n "$bindir" ]; then
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$bindir/pg_ctl" -D "$BERTH_PG_DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
  else
    "$bindir/pg_ctl" -D "$BERTH_PG_DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
  fi
fi
rm -rf "$BERTH_PG_DIR"
echo "[pg] down"
