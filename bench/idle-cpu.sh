#!/usr/bin/env bash
# What an idle demo instance costs: one instance (1 worker) on CPU 0 holding N quiet WebSocket
# connections on /chat (brisk-bench ws --mode hold, on CPU 1); utime+stime of every process of
# the instance over 10 s, from /proc (10 ms resolution).
#
#   bash bench/idle-cpu.sh [N] [DEMO]     # default 1 target/release/brisk-demo
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1}
DEMO=${2:-target/release/brisk-demo}
BENCH=target/release/brisk-bench
RUN=$(mktemp -d)
PORT=$((17700 + RANDOM % 200))
B=
cleanup() {
    [ -n "$B" ] && kill "$B" 2> /dev/null || true
    "$DEMO" --run-dir "$RUN" stop > /dev/null 2>&1 || true
    pkill -f "run-dir $RUN" 2> /dev/null || true
    rm -rf "$RUN"
}
trap cleanup EXIT
taskset -c 0 "$DEMO" --workers 1 --http "http://127.0.0.1:$PORT" --run-dir "$RUN" start -d > /dev/null
for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$PORT/" > /dev/null && break; sleep 0.2; done
taskset -c 1 "$BENCH" ws -c "$N" --ramp 5000 --hold 30s --mode hold --ready-file "$RUN/ready" \
    "ws://127.0.0.1:$PORT/chat" > /dev/null 2>&1 &
B=$!
for _ in $(seq 1 100); do [ -f "$RUN/ready" ] && break; sleep 0.2; done
sleep 2
pids=$(pgrep -f "run-dir $RUN" | tr '\n' ' ')
ticks() {
    local t=0 p
    for p in $pids; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2> /dev/null || echo 0))); done
    echo "$t"
}
a=$(ticks); sleep 10; b=$(ticks)
echo "$(cat "$RUN/ready") connections, $(echo $pids | wc -w) processes: $(( (b - a) * 10 )) ms of CPU over 10 s"
