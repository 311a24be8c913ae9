#!/usr/bin/env bash
# Requests lost during reloads and a graceful stop: Brisk (one SO_REUSEPORT socket per
# worker, and one socket shared by its workers) against nginx in the same run.
#
# Each target runs 2 workers on CPU 0; brisk-bench runs on CPU 1, with keep-alive
# (-c 100) and without (-c 50, a new connection per request), for SECONDS with RELOADS
# reloads spread over the run. Then a graceful stop (`stop -g`, `nginx -s quit`) halfway
# through a run: requests refused after the stop are connect errors; any other error is a
# request sent before the stop that got no answer.
#
# Usage: bench/reload.sh [SECONDS] [RELOADS] > table.md
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
RELOADS=${2:-5}
cargo build --release -q -p brisk-demo -p brisk-bench
BIN=$PWD/target/release
RUN=$(mktemp -d)
PORT=17402
URL="http://127.0.0.1:$PORT/"
DEMO=("$BIN/brisk-demo" --workers 2 --run-dir "$RUN/brisk" --text text://127.0.0.1:17400
      --frame frame://127.0.0.1:17401 --http "http://127.0.0.1:$PORT" --websocket websocket://127.0.0.1:17403)
SERVER_PID=
cleanup() {
    "${DEMO[@]}" stop >/dev/null 2>&1 || true
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
    rm -rf "$RUN"
}
trap cleanup EXIT

# shellcheck source=bench/lib/load.sh
source bench/lib/load.sh

# start TARGET: brisk (reuse-port), brisk-shared, or nginx; in the background.
start() {
    case $1 in
    brisk) taskset -c 0 "${DEMO[@]}" start -d >/dev/null ;;
    brisk-shared) taskset -c 0 "${DEMO[@]}" --shared-listener start -d >/dev/null ;;
    nginx)
        taskset -c 0 bench/peers/nginx/run.sh "$PORT" 2 "$PWD/crates/brisk-demo/static" "$RUN/nginx" &
        SERVER_PID=$!
        ;;
    esac
    wait_up
}

# control TARGET reload|stop
control() {
    case $1:$2 in
    nginx:reload) nginx -p "$RUN/nginx" -c "$RUN/nginx/nginx.conf" -s reload ;;
    nginx:stop) nginx -p "$RUN/nginx" -c "$RUN/nginx/nginx.conf" -s quit ;;
    *:reload) "${DEMO[@]}" reload >/dev/null ;;
    *:stop) "${DEMO[@]}" stop -g >/dev/null ;;
    esac
}

finish() {
    if [ "$1" = nginx ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=
    else
        "${DEMO[@]}" stop >/dev/null 2>&1 || true
    fi
}


echo "| target | load | event | requests | refused (connect) | lost (read, write, timeout, status) |"
echo "|---|---|---|---:|---:|---:|"
for target in brisk brisk-shared nginx; do
    for load in "-c 100" "-c 50 --no-keepalive"; do
        start $target
        out="$RUN/$target.json"
        # shellcheck disable=SC2086
        taskset -c 1 "$BIN/brisk-bench" http $load -d "${SECS}s" --json "$URL" > "$out" &
        bench=$!
        gap=$(python3 -c "print($SECS / ($RELOADS + 1))")
        for _ in $(seq "$RELOADS"); do
            sleep "$gap"
            control $target reload
        done
        wait $bench
        read -r n refused lost < <(errors "$out")
        echo "| $target | $load | $RELOADS reloads in ${SECS} s | $n | $refused | $lost |"
        finish $target
    done
    for load in "-c 100" "-c 50 --no-keepalive"; do
        start $target
        out="$RUN/$target-stop.json"
        # shellcheck disable=SC2086
        taskset -c 1 "$BIN/brisk-bench" http $load -d 6s --json "$URL" > "$out" &
        bench=$!
        sleep 3
        control $target stop
        wait $bench
        read -r n refused lost < <(errors "$out")
        echo "| $target | $load | graceful stop at 3 s of 6 | $n | $refused | $lost |"
        finish $target
    done
done
