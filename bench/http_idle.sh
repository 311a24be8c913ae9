#!/usr/bin/env bash
# Worker RSS per idle HTTP keep-alive connection: each connection sends one GET /, reads
# the answer, then stays open. Also the peak and settled RSS under keep-alive load at the
# same count. Usage: bench/http_idle.sh [CONNS] [LOAD_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-10000}
SECS=${2:-6}
ulimit -n $((CONNS * 2 + 1000)) 2>/dev/null || ulimit -n "$(ulimit -Hn)"
cargo build --release -q -p brisk-demo -p brisk-bench
BIN=target/release
RUN=$(mktemp -d)
PORT=17302
ARGS=(--workers 1 --run-dir "$RUN" --text text://127.0.0.1:17300 --frame frame://127.0.0.1:17301
      --http "http://127.0.0.1:$PORT" --websocket websocket://127.0.0.1:17303)
cleanup() { "$BIN/brisk-demo" "${ARGS[@]}" stop >/dev/null 2>&1 || true; rm -rf "$RUN"; }
trap cleanup EXIT
taskset -c 0 "$BIN/brisk-demo" "${ARGS[@]}" start -d >/dev/null
sleep 1
PID=$("$BIN/brisk-demo" "${ARGS[@]}" status --json | python3 -c "
import json,sys; print([w['pid'] for w in json.load(sys.stdin)['workers'] if w['server'].startswith('http://')][0])")
rss() { awk '/VmRSS/ {print $2}' "/proc/$PID/status"; }

# Idle: a Python client opens the connections one request each, then holds them.
taskset -c 1 python3 - "$PORT" "$CONNS" > "$RUN/idle.out" <<'PY' &
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while not data.endswith(b"Hello World"):
        data += s.recv(4096)
    socks.append(s)
print("open", len(socks), flush=True)
time.sleep(5)
PY
HOLD=$!
BEFORE=$(rss)
for _ in $(seq 1 1200); do grep -q open "$RUN/idle.out" 2>/dev/null && break; sleep 0.1; done
sleep 2
HELD=$(rss)
wait $HOLD || true
echo "idle keep-alive: $CONNS connections, RSS $BEFORE -> $HELD KiB, $(( (HELD - BEFORE) * 1024 / CONNS )) bytes per connection"

# Under load: brisk-bench keeps every connection busy; RSS sampled every 0.5 s.
sleep 2
BEFORE=$(rss)
taskset -c 1 "$BIN/brisk-bench" http -c "$CONNS" -d "${SECS}s" "http://127.0.0.1:$PORT/" > "$RUN/load.out" 2>&1 &
LOAD=$!
SAMPLES=()
while kill -0 "$LOAD" 2>/dev/null; do SAMPLES+=("$(rss)"); sleep 0.5; done
PEAK=$(printf '%s\n' "${SAMPLES[@]}" | sort -n | tail -1)
echo "under load: $CONNS connections, RSS $BEFORE KiB before, peak $PEAK KiB, last sample ${SAMPLES[-1]} KiB"
echo "samples (KiB, every 0.5 s): ${SAMPLES[*]}"
grep "Requests/sec" "$RUN/load.out"
