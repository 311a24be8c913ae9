#!/usr/bin/env bash
# The PostgreSQL server of the lab's database scenarios (bench/suite.toml,
# [databases.postgres]). Creates a cluster in DIR, seeds the TechEmpower tables
# (seed.sql: world with 10,000 rows, fortune with the 12 standard fortunes) while
# listening on its Unix socket only, then runs the server in the foreground on
# 127.0.0.1:PORT (brisk-bench stops it with SIGTERM to its process group).
# Every target of a run uses this one server with the same settings.
# Usage: postgres.sh DIR PORT      (as root: the server runs as `postgres`)
# Connect: postgres://bench:bench@127.0.0.1:PORT/bench
set -euo pipefail
DIR=${1:?usage: postgres.sh DIR PORT}
PORT=${2:?usage: postgres.sh DIR PORT}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$BIN/postgres" ] || { echo "postgres.sh: no PostgreSQL server; apt-get install postgresql" >&2; exit 1; }
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
as_pg=()
if [ "$(id -u)" = 0 ]; then
    chown postgres: "$DIR"
    as_pg=(runuser -u postgres --)
fi
DATA=$DIR/data
# Settings for every target alike. fsync and full_page_writes off: the lab measures the
# servers in front of the database, not the disk (TechEmpower's own configuration does the
# same); max_connections covers 50 workers' pools and the peers' pools.
SETTINGS=(-c fsync=off -c full_page_writes=off -c synchronous_commit=off
          -c max_connections=300 -c shared_buffers=256MB
          -c unix_socket_directories="$DIR")
"${as_pg[@]}" "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C --no-sync >"$DIR/initdb.log"
"${as_pg[@]}" "$BIN/pg_ctl" -D "$DATA" -l "$DIR/seed.log" -w \
    -o "-c listen_addresses='' -p $PORT -c unix_socket_directories=$DIR -c fsync=off" start >/dev/null
psql() { command psql -h "$DIR" -p "$PORT" -U postgres -X -q -v ON_ERROR_STOP=1 "$@"; }
psql -d postgres -c "CREATE ROLE bench LOGIN PASSWORD 'bench'"
psql -d postgres -c "CREATE DATABASE bench OWNER bench"
PGPASSWORD=bench command psql -h "$DIR" -p "$PORT" -U bench -d bench -X -q -v ON_ERROR_STOP=1 \
    -f "$HERE/seed-postgres.sql"
"${as_pg[@]}" "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
exec "${as_pg[@]}" "$BIN/postgres" -D "$DATA" -p "$PORT" -c listen_addresses=127.0.0.1 "${SETTINGS[@]}"
