#!/usr/bin/env bash
# The pause a WebSocket client sees while a reload hands its connection to a new worker
# (WsEndpoint::survive_reload, issue 36 item 2), and what a plain endpoint's clients see.
#
# The demo runs 2 workers on CPU 0; brisk-bench runs on CPU 1 with CONNS connections (half
# on each worker) sending echo messages at RATE per second in all, timed round trip by round
# trip, for SECONDS; RELOADS reloads are spread over the run. The echo latency's max and
# p99.9 over the run are the pause (an echo in flight when its connection moves waits for the
# move); the latency of a run without reloads is printed first for comparison. Then the same
# load on /ws, which does not survive reloads: its clients are disconnected. Each worker logs
# how long it took to hand its connections over, and each new worker how long the
# connections of each batch it restored were paused (median and max since they left the
# old worker; the five slowest batches), printed last.
#
# ACTION=upgrade runs `upgrade` instead of `reload` (the old master's workers hand the
# connections to the new master's through the bridge), and also prints how long each
# upgrade took from the command to the old master's exit.
#
# Usage: [ACTION=upgrade] bench/ws_handover.sh [CONNS] [SECONDS] [RELOADS] [RATE] > table.md
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-10000}
SECS=${2:-20}
RELOADS=${3:-3}
RATE=${4:-5000}
ACTION=${ACTION:-reload}
ulimit -n $((CONNS * 2 + 1000)) 2>/dev/null || true
cargo build --release -q -p brisk-demo -p brisk-bench
BIN=$PWD/target/release
RUN=$(mktemp -d)
PORT=17502
DEMO=("$BIN/brisk-demo" --workers 2 --run-dir "$RUN/brisk" --text text://127.0.0.1:17500
      --frame frame://127.0.0.1:17501 --http "http://127.0.0.1:$PORT" --websocket websocket://127.0.0.1:17503)
cleanup() { "${DEMO[@]}" stop >/dev/null 2>&1 || true; rm -rf "$RUN"; }
trap cleanup EXIT
taskset -c 0 "${DEMO[@]}" start -d >/dev/null

# load PATH RELOADS: the echo run's JSON report on stdout.
load() {
    taskset -c 1 "$BIN/brisk-bench" ws "ws://127.0.0.1:$PORT$1" -c "$CONNS" --threads 1 \
        --source-ips 127.0.0.1-127.0.0.4 --mode echo --rate "$RATE" --hold "${SECS}s" \
        --ready-file "$RUN/ready" --json > "$RUN/report.json" &
    local bench=$!
    until [ -e "$RUN/ready" ]; do sleep 0.2; done
    rm -f "$RUN/ready"
    for _ in $(seq "$2"); do
        sleep $((SECS / ($2 + 1)))
        local old t0
        old=$(cat "$RUN/brisk/brisk-demo.pid")
        t0=$(date +%s.%N)
        "${DEMO[@]}" "$ACTION" >/dev/null
        if [ "$ACTION" = upgrade ]; then
            while kill -0 "$old" 2>/dev/null; do sleep 0.01; done
            echo "- $1: upgrade to the old master's exit: $(echo "$(date +%s.%N) - $t0" | bc) s" \
                >> "$RUN/upgrades"
        fi
    done
    wait $bench
    cat "$RUN/report.json"
}

row() {
    python3 -c "
import json, sys
r = json.load(sys.stdin)
m, c, l = r['messages'], r['connections'], r['latency_us']
print(f\"| {sys.argv[1]} | {sys.argv[2]} | {c['succeeded']:,} | {c['open_at_end']:,} | {c['failed']['total']:,} \"
      f\"| {m['sent']:,} | {m['delivered']:,} | {m['duplicates']} | {m['reordered']} | {l['p50']/1000:.2f} | {l['p99']/1000:.2f} \"
      f\"| {l['p999']/1000:.2f} | {l['max']/1000:.1f} |\")" "$1" "$2"
}

echo "| path | ${ACTION}s | connected | open at the end | failed | echoes sent | echoed | twice | out of order | p50 ms | p99 ms | p99.9 ms | max ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
load /ws/durable 0 | row /ws/durable 0
load /ws/durable "$RELOADS" | row /ws/durable "$RELOADS"
load /ws "$RELOADS" | row /ws "$RELOADS"
echo
echo "Handover per worker (from the workers' log):"
cat "$RUN"/brisk/*.log | grep -o 'handed WebSocket connections over.*' | sed 's/^/- /'
echo
echo "Restored per batch, with the pause from leaving the old worker (from the new workers' log):"
cat "$RUN"/brisk/*.log | grep -o 'resumed handed-over WebSocket connections.*' |
    sed 's/^resumed handed-over WebSocket connections, paused from leaving their worker/-/' |
    sort -t= -k4 -g | tail -5
if [ -e "$RUN/upgrades" ]; then
    echo
    echo "Upgrades:"
    cat "$RUN/upgrades"
fi
