#!/usr/bin/env bash
# Worker RSS per WebSocket connection that sent one permessage-deflate message with its
# compression context kept (as browsers offer): the demo's /ws keeps each client's context (an
# inflater per connection), /chat holds clients to client_no_context_takeover (none).
# Usage: bench/ws_deflate_rss.sh [CONNS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-2000}
ROUNDS=${2:-2}
ulimit -n $((CONNS * 2 + 1000)) 2>/dev/null || true
cargo build --release -q -p brisk-demo
BIN=target/release
RUN=$(mktemp -d)
ARGS=(--workers 1 --run-dir "$RUN" --text text://127.0.0.1:17300 --frame frame://127.0.0.1:17301
      --http http://127.0.0.1:17302 --websocket websocket://127.0.0.1:17303)
cleanup() { "$BIN/brisk-demo" "${ARGS[@]}" stop >/dev/null 2>&1 || true; rm -rf "$RUN"; }
trap cleanup EXIT
taskset -c 0 "$BIN/brisk-demo" "${ARGS[@]}" start -d >/dev/null
PID=$("$BIN/brisk-demo" "${ARGS[@]}" status --json | python3 -c "
import json,sys; print([w['pid'] for w in json.load(sys.stdin)['workers'] if w['server'].startswith('http')][0])")
rss() { awk '/VmRSS/ {print $2}' "/proc/$PID/status"; }
echo "| path | connections | RSS before | RSS with them open | bytes per connection |"
echo "|---|---|---|---|---|"
for _ in $(seq "$ROUNDS"); do
    for path in "/ws" "/chat?room=r{i}"; do
        BEFORE=$(rss)
        taskset -c 1 python3 bench/lib/ws_deflate_clients.py 17302 "$path" "$CONNS" 3 > "$RUN/out" &
        CLIENTS=$!
        until grep -q open "$RUN/out" 2>/dev/null; do
            kill -0 $CLIENTS 2>/dev/null || { cat "$RUN/out"; exit 1; }
            sleep 0.2
        done
        sleep 1
        AFTER=$(rss)
        wait $CLIENTS
        echo "| $path | $CONNS | $BEFORE KiB | $AFTER KiB | $(( (AFTER - BEFORE) * 1024 / CONNS )) |"
        sleep 2
    done
done
