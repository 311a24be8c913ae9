#!/usr/bin/env bash
# What logging costs per request: the demo's `/` (Hello World, keep-alive) with and without
# the request span (`--no-request-spans`) and the access log (combined, to a file), one
# worker pinned to CPU 0 and brisk-bench on CPU 1, in the same run. CPU time per request is
# the worker's utime+stime (from /proc) over the requests answered.
#
#   bash bench/logging.sh [SECONDS] [CONNECTIONS]   # default 8 s, 50 connections
#
# Writes bench/results/logging/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-8}
CONNS=${2:-50}
DEMO=target/release/brisk-demo
BENCH=target/release/brisk-bench
[ -x "$DEMO" ] && [ -x "$BENCH" ] || cargo build --release -p brisk-demo -p brisk-bench
OUT=bench/results/logging
WORK=$(mktemp -d)
trap 'pkill -f -- "--run-dir $WORK/" || true; rm -rf "$WORK"' EXIT
PORT=18181
TICKS=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # name, demo flags...
  local name=$1; shift
  local run="$WORK/run-$RANDOM"
  mkdir -p "$run"
  taskset -c 0 "$DEMO" --workers 1 --http "http://127.0.0.1:$PORT" --text text://127.0.0.1:0 \
    --frame frame://127.0.0.1:0 --websocket websocket://127.0.0.1:0 --run-dir "$run" "$@" \
    start > "$run/out.log" 2>&1 &
  local master=$!
  for _ in $(seq 100); do
    "$DEMO" --run-dir "$run" status --json > /dev/null 2>&1 && break
    sleep 0.1
  done
  local worker
  worker=$("$DEMO" --run-dir "$run" status --json | python3 -c \
    "import json,sys; print([w['pid'] for w in json.load(sys.stdin)['workers'] if w['server'].startswith('http')][0])")
  taskset -c 1 "$BENCH" http -c "$CONNS" -d 2s "http://127.0.0.1:$PORT/" > /dev/null
  local before; before=$(cpu_ticks "$worker")
  local json; json=$(taskset -c 1 "$BENCH" http -c "$CONNS" -d "${SECS}s" --json "http://127.0.0.1:$PORT/")
  local after; after=$(cpu_ticks "$worker")
  local dropped
  dropped=$("$DEMO" --run-dir "$run" status --json | python3 -c \
    "import json,sys; print(sum(w.get('log_lines_dropped',0) for w in json.load(sys.stdin)['workers']))")
  "$DEMO" --run-dir "$run" stop > /dev/null
  wait "$master" || true
  python3 - "$name" "$json" "$before" "$after" "$TICKS" "$dropped" <<'PY'
import json, sys
name, j, before, after, ticks, dropped = sys.argv[1], json.loads(sys.argv[2]), *map(float, sys.argv[3:6]), sys.argv[6]
ok = j["requests"]
rps = j["rps"]
cpu_us = (after - before) / ticks * 1e6 / max(ok, 1)
print(f"| {name} | {rps:,.0f} | {cpu_us:.2f} | {dropped} |")
PY
}

{
  echo "# Logging cost per request: demo \`/\`, 1 worker on CPU 0, brisk-bench -c $CONNS on CPU 1, ${SECS} s each"
  echo
  echo "| configuration | req/s | worker CPU µs/request | lines dropped |"
  echo "|---|---|---|---|"
  run "no span, no access log" --no-request-spans
  run "request span (default)"
  run "span + access log (combined)" --access-log "$WORK/access.log"
  run "no span + access log (json)" --no-request-spans --access-log "$WORK/access.jsonl" --access-log-format json
  echo
  echo "Command: \`bash bench/logging.sh $SECS $CONNS\` ($(date -u +%Y-%m-%d))."
} | tee "$OUT/table.md"
