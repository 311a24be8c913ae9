#!/usr/bin/env bash
# nginx peer: `return 200` for / and /json, /static/ from STATIC_DIR with sendfile.
# Usage: run.sh PORT WORKERS STATIC_DIR RUN_DIR   (runs in the foreground; SIGTERM stops it)
# With NGINX_DAEMON=1 nginx goes to the background (its pid in RUN_DIR/nginx.pid), as it
# must for a binary upgrade (USR2): a master whose parent is alive ignores that signal.
set -euo pipefail
PORT=$1 WORKERS=$2 STATIC=$3 RUN=$4
mkdir -p "$RUN/tmp"
USER_LINE=""
[ "$(id -u)" = 0 ] && USER_LINE="user root;"
sed -e "s|@PORT@|$PORT|g" -e "s|@WORKERS@|$WORKERS|g" -e "s|@STATIC@|$STATIC|g" \
    -e "s|@RUN@|$RUN|g" -e "s|@USER@|$USER_LINE|g" \
    "$(dirname "$0")/nginx.conf.in" > "$RUN/nginx.conf"
if [ "${NGINX_DAEMON:-0}" = 1 ]; then
    # By its full path: the binary upgrade executes argv[0] again.
    exec "$(command -v nginx)" -p "$RUN" -e "$RUN/error.log" -c "$RUN/nginx.conf"
fi
exec nginx -p "$RUN" -e "$RUN/error.log" -c "$RUN/nginx.conf" -g "daemon off;"
