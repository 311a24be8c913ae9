#!/usr/bin/env bash
# Core figures for the README (issue: measure, don't time tests):
#   1. idle worker RSS,
#   2. worker RSS per idle Text connection at CONNS connections,
#   3. Text echo messages/s and CPU time per message on one pinned worker.
# The server runs pinned to CPU 0, the load to CPU 1. Usage: bench/core.sh [CONNS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-10000}
SECS=${2:-10}
ulimit -n 200000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
cargo build --release -q -p brisk-demo -p brisk-testkit --bin brisk-demo --bin brisk-load
BIN=target/release
RUN=$(mktemp -d)
TEXT=127.0.0.1:17000
FRAME=127.0.0.1:17001
cleanup() { "$BIN/brisk-demo" --run-dir "$RUN" stop >/dev/null 2>&1 || true; rm -rf "$RUN"; }
trap cleanup EXIT

taskset -c 0 "$BIN/brisk-demo" --workers 1 --text "text://$TEXT" --frame "frame://$FRAME" --run-dir "$RUN" start -d >/dev/null
worker_pid() { "$BIN/brisk-demo" --run-dir "$RUN" status --json | python3 -c '
import json,sys; s=json.load(sys.stdin)
print([w["pid"] for w in s["workers"] if w["server"].startswith("text://")][0])'; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
PID=$(worker_pid)
sleep 1
IDLE=$(rss "$PID")
IDLE_PRIVATE=$(awk '/^Private_(Clean|Dirty):/ {s += $2} END {print s}' "/proc/$PID/smaps_rollup")

# Idle connections, from 4 source addresses.
FIFO=$RUN/hold.out
taskset -c 1 "$BIN/brisk-load" hold "$TEXT" "$CONNS" 30 4 > "$FIFO" &
HOLD=$!
for _ in $(seq 1 600); do grep -q ready "$FIFO" 2>/dev/null && break; sleep 0.1; done
sleep 2
HELD=$(rss "$PID")
OPEN=$("$BIN/brisk-demo" --run-dir "$RUN" status --json | python3 -c '
import json,sys; print(sum(w["connections"] for w in json.load(sys.stdin)["workers"]))')
kill $HOLD 2>/dev/null || true; wait $HOLD 2>/dev/null || true
PER_CONN=$(( (HELD - IDLE) * 1024 / CONNS ))

# Echo throughput: 50 connections x 16 messages of 32 bytes in flight.
sleep 1
T0=$(cpu_ticks "$PID")
ECHO=$(taskset -c 1 "$BIN/brisk-load" echo "$TEXT" text 50 16 32 "$SECS")
T1=$(cpu_ticks "$PID")
HZ=$(getconf CLK_TCK)
MSGS=$(echo "$ECHO" | python3 -c 'import json,sys; print(json.load(sys.stdin)["messages"])')
RATE=$(echo "$ECHO" | python3 -c 'import json,sys; print(json.load(sys.stdin)["msgs_per_s"])')
US_PER_MSG=$(python3 -c "print(round(($T1-$T0)/$HZ*1e6/$MSGS, 3))")

echo "| figure | value |"
echo "|---|---|"
echo "| idle worker RSS | $IDLE KiB |"
echo "| idle worker private memory (RSS minus pages shared with other processes, e.g. code) | $IDLE_PRIVATE KiB |"
echo "| worker RSS with $OPEN idle Text connections | $HELD KiB |"
echo "| RSS per idle Text connection | $PER_CONN bytes |"
echo "| Text echo, 1 worker on CPU 0, load on CPU 1 (50 conns x 16 in flight, 32 B) | $RATE msgs/s |"
echo "| worker CPU time per echoed message | $US_PER_MSG µs |"
