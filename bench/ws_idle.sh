#!/usr/bin/env bash
# Worker RSS per idle WebSocket connection, on the websocket:// listener and through the HTTP
# upgrade route, sampled after the connections settle. Usage: bench/ws_idle.sh [CONNS] [SETTLE_S]
# DEMO=path/to/brisk-demo measures another build of the demo (an A/B: the old build beside
# the new, with this tree's brisk-bench as the load in both).
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-10000}
SETTLE=${2:-12}
ulimit -n $((CONNS * 2 + 1000)) 2>/dev/null || true
cargo build --release -q -p brisk-demo -p brisk-bench
BIN=target/release
DEMO=${DEMO:-$BIN/brisk-demo}
RUN=$(mktemp -d)
ARGS=(--workers 1 --run-dir "$RUN" --text text://127.0.0.1:17200 --frame frame://127.0.0.1:17201
      --http http://127.0.0.1:17202 --websocket websocket://127.0.0.1:17203)
cleanup() { "$DEMO" "${ARGS[@]}" stop >/dev/null 2>&1 || true; rm -rf "$RUN"; }
trap cleanup EXIT
taskset -c 0 "$DEMO" "${ARGS[@]}" start -d >/dev/null
pid_of() { "$DEMO" "${ARGS[@]}" status --json | python3 -c "
import json,sys; print([w['pid'] for w in json.load(sys.stdin)['workers'] if w['server'].startswith('$1')][0])"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
sleep 1
echo "| listener | connections open | RSS before | RSS after ${SETTLE}s | bytes per connection |"
echo "|---|---|---|---|---|"
for target in "websocket://|ws://127.0.0.1:17203/" "http://|ws://127.0.0.1:17202/ws"; do
    prefix=${target%%|*}; url=${target#*|}
    PID=$(pid_of "$prefix")
    BEFORE=$(rss "$PID")
    taskset -c 1 "$BIN/brisk-bench" ws "$url" -c "$CONNS" --ramp 20000 --hold $((SETTLE + 3))s \
        --source-ips 127.0.0.1-127.0.0.4 --json > "$RUN/hold.json" &
    HOLD=$!
    sleep $((CONNS / 20000 + 1 + SETTLE))
    AFTER=$(rss "$PID")
    OPEN=$("$DEMO" "${ARGS[@]}" status --json | python3 -c "
import json,sys; print(sum(w['connections'] for w in json.load(sys.stdin)['workers'] if w['pid'] == $PID))")
    wait $HOLD || true
    echo "| $url | $OPEN | $BEFORE KiB | $AFTER KiB | $(( (AFTER - BEFORE) * 1024 / (OPEN > 0 ? OPEN : 1) )) |"
done
