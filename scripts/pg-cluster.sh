#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the catalog's PostgreSQL tests (Debian's `postgresql` package, which
# scripts/setup-deps.sh installs). Run as root; the server runs as the `postgres` user.
#
#   eval "$(bash scripts/pg-cluster.sh start)"   # prints `export PERMAFROST_TEST_PG_URL=...; export PERMAFROST_TEST_PG_DIR=...`
#   bash scripts/pg-cluster.sh stop "$PERMAFROST_TEST_PG_DIR"   # stops the server and removes the directory
#
# The cluster lives in a temporary directory, listens on 127.0.0.1 on a free port (and a socket in that
# directory), runs every transaction at SERIALIZABLE by default (the catalog asks for it anyway), and skips fsync
# (it is thrown away). Commits stay synchronous: each commit's WAL reaches the OS before the client hears of it,
# so a server killed with SIGKILL (the end-to-end kill test) loses no committed transaction; only a crash of the
# machine could. The tests log in as `permafrost` with a password (scram-sha-256 over TCP), so that a wrong
# password is refused as on a real server.
set -euo pipefail

bindir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return; }
  done
  echo "pg-cluster: no PostgreSQL server found (/usr/lib/postgresql/*/bin/initdb); run scripts/setup-deps.sh" >&2
  exit 1
}

as_postgres() {
  if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi
}

case "${1:-}" in
  start)
    bin=$(bindir)
    dir=$(mktemp -d /tmp/permafrost-pg.XXXXXX)
    chown postgres: "$dir" 2>/dev/null || true
    chmod 700 "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    password=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
    as_postgres "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
      --no-locale -E UTF8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start -o \
      "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off \
       -c full_page_writes=off -c default_transaction_isolation=serializable -c max_connections=300 \
       -c shared_buffers=64MB" >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    as_postgres "$bin/psql" -q -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
      -c "CREATE ROLE permafrost LOGIN CREATEDB PASSWORD '$password'" \
      -c "CREATE DATABASE permafrost OWNER permafrost" >/dev/null
    echo "export PERMAFROST_TEST_PG_URL='postgresql://permafrost:$password@127.0.0.1:$port/permafrost'"
    echo "export PERMAFROST_TEST_PG_DIR='$dir'"
    ;;
  stop)
    dir=${2:?usage: pg-cluster.sh stop DIR}
    case "$dir" in /tmp/permafrost-pg.*) ;; *) echo "pg-cluster: refusing to remove $dir" >&2; exit 1 ;; esac
    bin=$(bindir)
    if [ -d "$dir/data" ]; then
      as_postgres "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
  *)
    echo "usage: pg-cluster.sh start | stop DIR" >&2
    exit 2
    ;;
esac
