#!/usr/bin/env bash
# Binary upgrades under load: Brisk's `upgrade` (one SO_REUSEPORT socket per worker, and one
# socket shared by its workers) against nginx's (USR2 to the old master, then QUIT to it
# once the new master's workers run) in the same run.
#
# Each target runs 2 workers on CPU 0; brisk-bench runs on CPU 1, with keep-alive (-c 100)
# and without (-c 50, a new connection per request), for SECONDS with UPGRADES upgrades
# spread over the run. Per upgrade: how long until the new master serves (Brisk: `upgrade`
# returned; nginx: the new master's workers are up), and until the old master has exited
# (its workers drained). Requests refused are connect errors; any other error is a request
# that got no answer.
#
# Usage: bench/upgrade.sh [SECONDS] [UPGRADES] > table.md
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
UPGRADES=${2:-5}
cargo build --release -q -p brisk-demo -p brisk-bench
BIN=$PWD/target/release
RUN=$(mktemp -d)
PORT=17412
URL="http://127.0.0.1:$PORT/"
DEMO=("$BIN/brisk-demo" --workers 2 --run-dir "$RUN/brisk" --text text://127.0.0.1:17410
      --frame frame://127.0.0.1:17411 --http "http://127.0.0.1:$PORT" --websocket websocket://127.0.0.1:17413)
cleanup() {
    "${DEMO[@]}" stop >/dev/null 2>&1 || true
    [ -f "$RUN/nginx/nginx.pid" ] && kill "$(cat "$RUN/nginx/nginx.pid")" 2>/dev/null || true
    rm -rf "$RUN"
}
trap cleanup EXIT

# shellcheck source=bench/lib/load.sh
source bench/lib/load.sh

# alive PID: the process exists and is not a zombie.
alive() {
    local s
    s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ $s != Z* ]]
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

start() {
    case $1 in
    brisk) taskset -c 0 "${DEMO[@]}" start -d >/dev/null ;;
    brisk-shared) taskset -c 0 "${DEMO[@]}" --shared-listener start -d >/dev/null ;;
    nginx)
        NGINX_DAEMON=1 taskset -c 0 bench/peers/nginx/run.sh "$PORT" 2 \
            "$PWD/crates/brisk-demo/static" "$RUN/nginx"
        ;;
    esac
    wait_up
}

# upgrade TARGET: prints "SERVING_MS GONE_MS".
upgrade() {
    local t0 t1 old new
    t0=$(now_ms)
    if [ "$1" = nginx ]; then
        old=$(cat "$RUN/nginx/nginx.pid")
        kill -USR2 "$old"
        while :; do
            new=$(cat "$RUN/nginx/nginx.pid" 2>/dev/null || echo "$old")
            if [ "$new" != "$old" ] && [ "$(pgrep -c -P "$new" || true)" -ge 2 ]; then break; fi
            sleep 0.005
        done
        t1=$(now_ms)
        kill -QUIT "$old"
    else
        old=$(cat "$RUN/brisk/brisk-demo.pid")
        "${DEMO[@]}" upgrade >/dev/null
        t1=$(now_ms)
    fi
    while alive "$old"; do sleep 0.005; done
    echo "$((t1 - t0)) $(($(now_ms) - t0))"
}

finish() {
    if [ "$1" = nginx ]; then
        kill -QUIT "$(cat "$RUN/nginx/nginx.pid")" 2>/dev/null || true
        while [ -f "$RUN/nginx/nginx.pid" ]; do sleep 0.05; done
    else
        "${DEMO[@]}" stop >/dev/null 2>&1 || true
    fi
}


# spread "A B C …": "median / max"
spread() {
    python3 -c '
import statistics, sys
v = [int(x) for x in sys.argv[1:]]
print(f"{statistics.median(v):.0f} / {max(v)}")' "$@"
}

echo "| target | load | event | requests | refused (connect) | lost | new master serves after, ms (median / max) | old master gone after, ms (median / max) |"
echo "|---|---|---|---:|---:|---:|---:|---:|"
for target in brisk brisk-shared nginx; do
    for load in "-c 100" "-c 50 --no-keepalive"; do
        start $target
        out="$RUN/$target.json"
        # shellcheck disable=SC2086
        taskset -c 1 "$BIN/brisk-bench" http $load -d "${SECS}s" --json "$URL" > "$out" &
        bench=$!
        gap=$(python3 -c "print($SECS / ($UPGRADES + 1))")
        serving=() gone=()
        for _ in $(seq "$UPGRADES"); do
            sleep "$gap"
            read -r s g < <(upgrade $target)
            serving+=("$s") gone+=("$g")
        done
        wait $bench
        read -r n refused lost < <(errors "$out")
        echo "| $target | $load | $UPGRADES upgrades in ${SECS} s | $n | $refused | $lost | $(spread "${serving[@]}") | $(spread "${gone[@]}") |"
        finish $target
    done
done
