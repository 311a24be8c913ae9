#!/usr/bin/env bash
# What the latency histograms cost per request: the demo's `/` (Hello World, keep-alive) with
# them (the default) and without (`--no-latency-histograms`), one worker pinned to CPU 0 and
# brisk-bench on CPU 1. The two configurations alternate ROUNDS times in one run, so a machine
# that drifts slows both alike; the table gives every round and the medians. CPU time per
# request is the worker's utime+stime (from /proc) over the requests answered.
#
#   bash bench/kpis.sh [SECONDS] [CONNECTIONS] [ROUNDS]   # default 5 s, 50 connections, 5 rounds
#
# Writes bench/results/kpis/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
CONNS=${2:-50}
ROUNDS=${3:-5}
DEMO=target/release/brisk-demo
BENCH=target/release/brisk-bench
[ -x "$DEMO" ] && [ -x "$BENCH" ] || cargo build --release -p brisk-demo -p brisk-bench
OUT=bench/results/kpis
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'pkill -f -- "--run-dir $WORK/" || true; rm -rf "$WORK"' EXIT
TICKS=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

start() { # name port flags... -> prints the worker pid
  local run="$WORK/$1"; local port=$2; shift 2
  mkdir -p "$run"
  taskset -c 0 "$DEMO" --workers 1 --http "http://127.0.0.1:$port" --text text://127.0.0.1:0 \
    --frame frame://127.0.0.1:0 --websocket websocket://127.0.0.1:0 --run-dir "$run" "$@" \
    start > "$run/out.log" 2>&1 &
  for _ in $(seq 100); do
    "$DEMO" --run-dir "$run" status --json > /dev/null 2>&1 && break
    sleep 0.1
  done
  "$DEMO" --run-dir "$run" status --json | python3 -c \
    "import json,sys; print([w['pid'] for w in json.load(sys.stdin)['workers'] if w['server'].startswith('http')][0])"
}

measure() { # port worker-pid -> "req/s cpu-us-per-request"
  local before after json
  before=$(cpu_ticks "$2")
  json=$(taskset -c 1 "$BENCH" http -c "$CONNS" -d "${SECS}s" --json "http://127.0.0.1:$1/")
  after=$(cpu_ticks "$2")
  python3 -c "import json,sys; j=json.loads(sys.argv[1]); print(round(j['rps']), round((float(sys.argv[3])-float(sys.argv[2]))/float(sys.argv[4])*1e6/max(j['requests'],1), 3))" \
    "$json" "$before" "$after" "$TICKS"
}

ON=$(start on 18191)
OFF=$(start off 18192 --no-latency-histograms)
for port in 18191 18192; do taskset -c 1 "$BENCH" http -c "$CONNS" -d 2s "http://127.0.0.1:$port/" > /dev/null; done
rows=()
for r in $(seq "$ROUNDS"); do
  on=$(measure 18191 "$ON")
  off=$(measure 18192 "$OFF")
  rows+=("$r $on $off")
done
"$DEMO" --run-dir "$WORK/on" stop > /dev/null
"$DEMO" --run-dir "$WORK/off" stop > /dev/null
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
print("| round | with histograms req/s | µs/req | without req/s | µs/req |")
print("|---|---|---|---|---|")
for r, a, b, c, d in rows:
    print(f"| {r} | {int(a):,} | {float(b):.2f} | {int(c):,} | {float(d):.2f} |")
on = statistics.median(float(r[2]) for r in rows)
off = statistics.median(float(r[4]) for r in rows)
print(f"| median | | {on:.2f} | | {off:.2f} |")
print()
print(f"With histograms the worker spent {100 * (on - off) / off:+.1f} % CPU per request (medians).")
' > "$WORK/table"
{
  echo "# Latency histograms: cost per request, demo \`/\`, 1 worker on CPU 0, brisk-bench -c $CONNS on CPU 1, ${SECS} s per run, alternating"
  echo
  cat "$WORK/table"
  echo
  echo "Command: \`bash bench/kpis.sh $SECS $CONNS $ROUNDS\` ($(date -u +%Y-%m-%d))."
} | tee "$OUT/table.md"
