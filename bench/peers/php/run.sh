#!/usr/bin/env bash
# PHP-FPM behind nginx: / and /json from index.php (no WebSocket, no static).
# Usage: run.sh PORT NGINX_WORKERS FPM_CHILDREN RUN_DIR   (foreground; SIGTERM to the group stops all)
set -euo pipefail
PORT=$1 WORKERS=$2 CHILDREN=$3 RUN=$4
HERE=$(cd "$(dirname "$0")" && pwd)
FPM=$(command -v php-fpm8.2 || command -v php-fpm || ls /usr/sbin/php-fpm* 2>/dev/null | head -1)
mkdir -p "$RUN/tmp"
USER_LINE=""
[ "$(id -u)" = 0 ] && USER_LINE="user root;"
sed -e "s|@RUN@|$RUN|g" -e "s|@CHILDREN@|$CHILDREN|g" "$HERE/php-fpm.conf.in" > "$RUN/php-fpm.conf"
sed -e "s|@PORT@|$PORT|g" -e "s|@WORKERS@|$WORKERS|g" -e "s|@RUN@|$RUN|g" \
    -e "s|@USER@|$USER_LINE|g" -e "s|@HERE@|$HERE|g" "$HERE/nginx.conf.in" > "$RUN/nginx.conf"
"$FPM" -F -R -y "$RUN/php-fpm.conf" &
for _ in $(seq 1 100); do [ -S "$RUN/php-fpm.sock" ] && break; sleep 0.05; done
nginx -p "$RUN" -e "$RUN/error.log" -c "$RUN/nginx.conf" -g "daemon off;" &
trap 'kill -TERM $(jobs -p) 2>/dev/null; wait' TERM INT
wait -n
