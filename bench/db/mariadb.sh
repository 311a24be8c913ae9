#!/usr/bin/env bash
# The MariaDB server of the lab's R1.2 scenario (bench/suite.toml,
# [databases.mariadb]). Creates the system tables in DIR, seeds the TechEmpower
# tables (seed-mariadb.sql) with networking off, then runs the server in the
# foreground on 127.0.0.1:PORT (brisk-bench stops it with SIGTERM to its group).
# Usage: mariadb.sh DIR PORT      (as root: the server runs as `mysql`)
# Connect: mysql://bench:bench@127.0.0.1:PORT/bench
set -euo pipefail
DIR=${1:?usage: mariadb.sh DIR PORT}
PORT=${2:?usage: mariadb.sh DIR PORT}
HERE=$(cd "$(dirname "$0")" && pwd)
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || {
    echo "mariadb.sh: no MariaDB server; apt-get install mariadb-server" >&2; exit 1; }
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
user=()
if [ "$(id -u)" = 0 ]; then
    chown mysql: "$DIR"
    user=(--user=mysql)
fi
# --no-defaults: Debian's /etc/mysql configuration is not this server's. The same settings
# for every target: commits written to the OS and flushed once a second, a buffer pool that
# holds the tables, the binary log off.
COMMON=(--no-defaults --datadir="$DIR/data" --socket="$DIR/mysqld.sock" --pid-file="$DIR/mysqld.pid"
        --innodb-log-file-size=64M --innodb-buffer-pool-size=256M --innodb-flush-log-at-trx-commit=2
        --skip-log-bin --skip-name-resolve --max-connections=300
        --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci "${user[@]}")
mariadb-install-db --no-defaults --datadir="$DIR/data" "${user[@]}" \
    --auth-root-authentication-method=normal --skip-test-db >"$DIR/install-db.log" 2>&1
/usr/sbin/mariadbd "${COMMON[@]}" --skip-networking >"$DIR/seed.log" 2>&1 &
seeding=$!
for _ in $(seq 1 100); do
    mariadb --no-defaults -S "$DIR/mysqld.sock" -uroot -e "SELECT 1" >/dev/null 2>&1 && break
    sleep 0.1
done
mariadb --no-defaults -S "$DIR/mysqld.sock" -uroot <<SQL
CREATE DATABASE bench;
CREATE USER 'bench'@'%' IDENTIFIED BY 'bench';
GRANT ALL PRIVILEGES ON bench.* TO 'bench'@'%';
SQL
mariadb --no-defaults -S "$DIR/mysqld.sock" -uroot bench <"$HERE/seed-mariadb.sql"
kill "$seeding"
wait "$seeding" || true
exec /usr/sbin/mariadbd "${COMMON[@]}" --port="$PORT" --bind-address=127.0.0.1
