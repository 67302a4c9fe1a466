#!/usr/bin/env bash
# A throwaway PostgreSQL primary with a synchronous standby, for the catalog's failover tests (Debian's
# `postgresql` package, which scripts/setup-deps.sh installs). Run as root; the servers run as the `postgres`
# user. docs/cluster.md ("The catalog database: a primary and a synchronous standby") is the runbook.
#
#   eval "$(bash scripts/pg-standby.sh start)"    # prints the exports below
#   bash scripts/pg-standby.sh promote "$PERMAFROST_TEST_PG_DIR" b   # pg_ctl promote on server b
#   bash scripts/pg-standby.sh rejoin "$PERMAFROST_TEST_PG_DIR" a b  # server a (stopped or dead) becomes a
#                                                 # synchronous standby of b again (fresh base backup)
#   bash scripts/pg-standby.sh status "$PERMAFROST_TEST_PG_DIR"      # each server: primary, standby or down
#   bash scripts/pg-standby.sh stop "$PERMAFROST_TEST_PG_DIR"        # stops both and removes the directory
#
# `start` prints
#   PERMAFROST_TEST_PG_URL          postgresql://permafrost:PW@127.0.0.1:PA,127.0.0.1:PB/permafrost?target_session_attrs=read-write
#   PERMAFROST_TEST_PG_KV_URL       the same as libpq key/value pairs (host=127.0.0.1,127.0.0.1 port=PA,PB ...)
#   PERMAFROST_TEST_PG_DIR          the directory holding both servers (a/ and b/, each data/ and server.log)
#   PERMAFROST_TEST_PG_PRIMARY_DATA, PERMAFROST_TEST_PG_STANDBY_DATA   data directories (a/data, b/data)
#   PERMAFROST_TEST_PG_PRIMARY_PORT, PERMAFROST_TEST_PG_STANDBY_PORT
#   PERMAFROST_TEST_PG_PRIMARY_PID,  PERMAFROST_TEST_PG_STANDBY_PID    the postmasters' pids
#
# Server a starts as the primary with synchronous_standby_names = 'pf_b' and synchronous_commit = on: a commit
# returns only once standby b has written its WAL, so an acknowledged transaction survives the loss of a.
# Standby b is made with `pg_basebackup -R` and has synchronous_standby_names = '' of its own, so that once
# promoted it commits alone (there is no standby to wait for until one rejoins). Both listen on 127.0.0.1 on
# free ports and skip fsync (they are thrown away; a SIGKILLed postmaster loses nothing the OS has). Unlike
# scripts/pg-cluster.sh the default isolation stays READ COMMITTED: a hot standby refuses a SERIALIZABLE default
# (the catalog asks for SERIALIZABLE itself).
set -euo pipefail

bindir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return; }
  done
  echo "pg-standby: no PostgreSQL server found (/usr/lib/postgresql/*/bin/initdb); run scripts/setup-deps.sh" >&2
  exit 1
}

as_postgres() {
  if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

check_dir() {
  case "$1" in /tmp/permafrost-pgha.*) ;; *) echo "pg-standby: not a directory of this script: $1" >&2; exit 1 ;; esac
  [ -d "$1" ] || { echo "pg-standby: no such directory: $1" >&2; exit 1; }
}

check_name() {
  case "$1" in a|b) ;; *) echo "pg-standby: server name must be a or b, not '$1'" >&2; exit 2 ;; esac
}

# The settings every server keeps in its postgresql.conf (so that a restart or a promotion keeps them).
write_conf() { # dir name port
  cat >>"$1/$2/data/postgresql.conf" <<EOF
# pg-standby.sh
listen_addresses = '127.0.0.1'
port = $3
unix_socket_directories = '$1/$2'
cluster_name = 'pf_$2'
fsync = off
full_page_writes = on
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
wal_keep_size = '256MB'
hot_standby = on
max_connections = 300
shared_buffers = '64MB'
synchronous_commit = on
EOF
}

server_start() { # dir name
  as_postgres "$bin/pg_ctl" -D "$1/$2/data" -l "$1/$2/server.log" -w -t 60 start >/dev/null \
    || { cat "$1/$2/server.log" >&2; exit 1; }
}

sql() { # dir name sql...
  local dir=$1 name=$2; shift 2
  as_postgres "$bin/psql" -qAtX -h "$dir/$name" -p "$(cat "$dir/$name/port")" -U postgres -d postgres \
    -v ON_ERROR_STOP=1 "$@"
}

# Make server `name` a standby of `from` by a fresh base backup (its data directory is replaced), start it, and
# make it `from`'s synchronous standby.
make_standby() { # dir name from
  local dir=$1 name=$2 from=$3 port
  port=$(cat "$dir/$name/port")
  rm -rf "$dir/$name/data"
  as_postgres "$bin/pg_basebackup" -D "$dir/$name/data" -X stream -c fast -R \
    -d "host=127.0.0.1 port=$(cat "$dir/$from/port") user=replicator password=$(cat "$dir/replicator.pw") application_name=pf_$name" \
    >"$dir/$name/basebackup.log" 2>&1 || { cat "$dir/$name/basebackup.log" >&2; exit 1; }
  # The copied postgresql.conf is `from`'s: the later lines win.
  write_conf "$dir" "$name" "$port"
  echo "synchronous_standby_names = ''" >>"$dir/$name/data/postgresql.conf"
  server_start "$dir" "$name"
  sql "$dir" "$from" -c "ALTER SYSTEM SET synchronous_standby_names = 'pf_$name'" -c "SELECT pg_reload_conf()" >/dev/null
  local i state=""
  for i in $(seq 1 300); do
    state=$(sql "$dir" "$from" -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'pf_$name'" || true)
    [ "$state" = sync ] && return 0
    sleep 0.1
  done
  echo "pg-standby: server $name did not become the synchronous standby of $from (state '$state')" >&2
  exit 1
}

pid_of() { # dir name
  local f="$1/$2/data/postmaster.pid"
  [ -f "$f" ] && head -1 "$f" || echo ""
}

role_of() { # dir name
  local r
  r=$(sql "$1" "$2" -c "SELECT CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE 'primary' END" 2>/dev/null) || r=down
  echo "$r"
}

case "${1:-}" in
  start)
    bin=$(bindir)
    dir=$(mktemp -d /tmp/permafrost-pgha.XXXXXX)
    chmod 755 "$dir"
    mkdir -p "$dir/a" "$dir/b"
    chown postgres: "$dir/a" "$dir/b" 2>/dev/null || true
    chmod 700 "$dir/a" "$dir/b"
    free_port >"$dir/a/port"
    free_port >"$dir/b/port"
    password=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
    python3 -c 'import secrets; print(secrets.token_hex(12))' >"$dir/replicator.pw"
    as_postgres "$bin/initdb" -D "$dir/a/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
      --no-locale -E UTF8 >"$dir/a/initdb.log" 2>&1 || { cat "$dir/a/initdb.log" >&2; exit 1; }
    write_conf "$dir" a "$(cat "$dir/a/port")"
    server_start "$dir" a
    sql "$dir" a \
      -c "CREATE ROLE permafrost LOGIN CREATEDB PASSWORD '$password'" \
      -c "CREATE ROLE replicator LOGIN REPLICATION PASSWORD '$(cat "$dir/replicator.pw")'" \
      -c "CREATE DATABASE permafrost OWNER permafrost" >/dev/null
    make_standby "$dir" b a
    pa=$(cat "$dir/a/port") pb=$(cat "$dir/b/port")
    echo "export PERMAFROST_TEST_PG_URL='postgresql://permafrost:$password@127.0.0.1:$pa,127.0.0.1:$pb/permafrost?target_session_attrs=read-write'"
    echo "export PERMAFROST_TEST_PG_KV_URL='host=127.0.0.1,127.0.0.1 port=$pa,$pb user=permafrost password=$password dbname=permafrost target_session_attrs=read-write'"
    echo "export PERMAFROST_TEST_PG_DIR='$dir'"
    echo "export PERMAFROST_TEST_PG_PRIMARY_DATA='$dir/a/data'"
    echo "export PERMAFROST_TEST_PG_STANDBY_DATA='$dir/b/data'"
    echo "export PERMAFROST_TEST_PG_PRIMARY_PORT='$pa'"
    echo "export PERMAFROST_TEST_PG_STANDBY_PORT='$pb'"
    echo "export PERMAFROST_TEST_PG_PRIMARY_PID='$(pid_of "$dir" a)'"
    echo "export PERMAFROST_TEST_PG_STANDBY_PID='$(pid_of "$dir" b)'"
    ;;
  promote)
    dir=${2:?usage: pg-standby.sh promote DIR a|b}
    name=${3:-b}
    check_dir "$dir"; check_name "$name"
    bin=$(bindir)
    as_postgres "$bin/pg_ctl" -D "$dir/$name/data" -w -t 60 promote >/dev/null
    echo "pg-standby: server $name ($(cat "$dir/$name/port")) is $(role_of "$dir" "$name")"
    ;;
  rejoin)
    dir=${2:?usage: pg-standby.sh rejoin DIR NAME PRIMARY}
    name=${3:?usage: pg-standby.sh rejoin DIR NAME PRIMARY}
    from=${4:?usage: pg-standby.sh rejoin DIR NAME PRIMARY}
    check_dir "$dir"; check_name "$name"; check_name "$from"
    [ "$name" != "$from" ] || { echo "pg-standby: a server cannot follow itself" >&2; exit 2; }
    bin=$(bindir)
    [ "$(role_of "$dir" "$from")" = primary ] || { echo "pg-standby: server $from is not a running primary" >&2; exit 1; }
    # Whatever is left of the old server goes: its WAL may hold transactions the new primary never saw (they
    # were never acknowledged: the commit waited for the standby).
    if [ -n "$(pid_of "$dir" "$name")" ]; then
      as_postgres "$bin/pg_ctl" -D "$dir/$name/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    make_standby "$dir" "$name" "$from"
    echo "pg-standby: server $name ($(cat "$dir/$name/port")) is the synchronous standby of $from ($(cat "$dir/$from/port"))"
    ;;
  status)
    dir=${2:?usage: pg-standby.sh status DIR}
    check_dir "$dir"
    bin=$(bindir)
    for name in a b; do
      echo "$name 127.0.0.1:$(cat "$dir/$name/port") $(role_of "$dir" "$name") pid=$(pid_of "$dir" "$name")"
    done
    ;;
  stop)
    dir=${2:?usage: pg-standby.sh stop DIR}
    check_dir "$dir"
    bin=$(bindir)
    for name in a b; do
      if [ -f "$dir/$name/data/postmaster.pid" ]; then
        as_postgres "$bin/pg_ctl" -D "$dir/$name/data" -m immediate -w stop >/dev/null 2>&1 || true
      fi
    done
    rm -rf "$dir"
    ;;
  *)
    echo "usage: pg-standby.sh start | promote DIR [a|b] | rejoin DIR NAME PRIMARY | status DIR | stop DIR" >&2
    exit 2
    ;;
esac
