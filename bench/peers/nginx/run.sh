#!/usr/bin/env bash
# nginx peer: `return 200` for / and /json, /static/ from STATIC_DIR with sendfile.
# Usage: run.sh PORT WORKERS STATIC_DIR RUN_DIR   (runs in the foreground; SIGTERM stops it)
set -euo pipefail
PORT=$1 WORKERS=$2 STATIC=$3 RUN=$4
mkdir -p "$RUN/tmp"
USER_LINE=""
[ "$(id -u)" = 0 ] && USER_LINE="user root;"
sed -e "s|@PORT@|$PORT|g" -e "s|@WORKERS@|$WORKERS|g" -e "s|@STATIC@|$STATIC|g" \
    -e "s|@RUN@|$RUN|g" -e "s|@USER@|$USER_LINE|g" \
    "$(dirname "$0")/nginx.conf.in" > "$RUN/nginx.conf"
exec nginx -p "$RUN" -e "$RUN/error.log" -c "$RUN/nginx.conf" -g "daemon off;"
