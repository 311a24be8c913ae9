#!/usr/bin/env bash
# The transaction-heavy point: `POST /api/rooms/{id}/messages` (check the JSON body, then in
# one transaction bump the room's counter and insert the message) on PostgreSQL, the demo's
# route (one worker) against the same route in axum + sqlx (bench/peers/axum-sqlx: one
# single-threaded runtime, a pool of 4 connections, as a Brisk worker's transactions have).
# The server on CPU 0, PostgreSQL (bench/db/postgres.sh) and brisk-bench on CPU 1; the
# targets alternate ROUNDS times, each posting for SECONDS over CONNECTIONS keep-alive
# connections to a room of its own. CPU µs per request of the server and of PostgreSQL
# (utime+stime from /proc); the table gives the medians.
#
#   bash bench/api.sh [ROUNDS] [SECONDS] [CONNECTIONS]   # default 5 5 50
#
# Writes bench/results/api/table-cCONNECTIONS.md (and raw-cCONNECTIONS.txt, every round).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-5}
CONNS=${3:-50}
DEMO=target/release/brisk-demo
BENCH=target/release/brisk-bench
PEER=target/peers/release/peer-axum-sqlx
[ -x "$DEMO" ] && [ -x "$BENCH" ] || cargo build --release -p brisk-demo -p brisk-bench
[ -x "$PEER" ] || CARGO_TARGET_DIR=$PWD/target/peers \
  cargo build --release --manifest-path bench/peers/axum-sqlx/Cargo.toml
OUT=bench/results/api
mkdir -p "$OUT"
WORK=$(mktemp -d)
chmod 755 "$WORK"
PG_PORT=16490
BRISK_PORT=16491
PEER_PORT=16492
URL=postgres://bench:bench@127.0.0.1:$PG_PORT/bench
TICKS=$(getconf CLK_TCK)
cleanup() {
  "$DEMO" --run-dir "$WORK/run" stop > /dev/null 2>&1 || true
  [ -n "${PEER_PID:-}" ] && kill -9 "$PEER_PID" 2> /dev/null || true
  [ -n "${PG_PID:-}" ] && kill -TERM -- "-$PG_PID" 2> /dev/null || true
  sleep 1
  rm -rf "$WORK"
}
trap cleanup EXIT

setsid taskset -c 1 bash bench/db/postgres.sh "$WORK/pg" "$PG_PORT" > "$WORK/pg.log" 2>&1 &
PG_PID=$!
for _ in $(seq 200); do
  PGPASSWORD=bench psql -h 127.0.0.1 -p "$PG_PORT" -U bench -d bench -Atc 'SELECT 1' \
    > /dev/null 2>&1 && break
  sleep 0.1
done

# The demo: its migrations make the chat's tables, which the peer uses too.
taskset -c 0 "$DEMO" --workers 1 --run-dir "$WORK/run" --database "$URL" \
  --http "http://127.0.0.1:$BRISK_PORT" --websocket websocket://127.0.0.1:16493 \
  --text text://127.0.0.1:16494 --frame frame://127.0.0.1:16495 start -d > /dev/null
BRISK_PID=$("$DEMO" --run-dir "$WORK/run" status --json | python3 -c "
import json, sys
print(next(w['pid'] for w in json.load(sys.stdin)['workers'] if w['server'].startswith('http://')))")
DATABASE_URL=$URL PORT=$PEER_PORT DB_POOL=4 taskset -c 0 "$PEER" > "$WORK/peer.log" 2>&1 &
PEER_PID=$!
disown "$PEER_PID"
room() {
  curl -s -X POST "http://127.0.0.1:$BRISK_PORT/api/rooms" -d "{\"name\": \"$1\"}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'
}
BRISK_ROOM=$(room brisk)
PEER_ROOM=$(room axum-sqlx)
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$PEER_PORT/" && break
  sleep 0.1
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The PostgreSQL server's CPU: its postmaster and every backend (the pools keep theirs).
pg_ticks() {
  local master total=0
  master=$(pgrep -u postgres -f -- "-D $WORK/pg/data" | head -1)
  for pid in $master $(pgrep -P "$master"); do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2> /dev/null || echo 0)))
  done
  echo "$total"
}

# run TARGET PID PORT ROOM -> "TARGET req/s server-µs/req pg-µs/req errors"
run() {
  local before pg_before out
  before=$(cpu_ticks "$2")
  pg_before=$(pg_ticks)
  out=$(taskset -c 1 "$BENCH" http -c "$CONNS" -d "${SECS}s" -m POST \
    -H 'Content-Type: application/json' --body '{"author": "bench", "text": "hello, room"}' \
    --json "http://127.0.0.1:$3/api/rooms/$4/messages")
  local after pg_after
  after=$(cpu_ticks "$2")
  pg_after=$(pg_ticks)
  python3 - "$1" "$((after - before))" "$((pg_after - pg_before))" "$TICKS" "$out" << 'EOF'
import json, sys
target, ticks, pg, hz, report = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
done = report["requests"]
errors = report["errors"]["total"]
print(f"{target} {report['rps']:.0f} {ticks / hz * 1e6 / done:.1f} {pg / hz * 1e6 / done:.1f} {errors}")
EOF
}

: > "$OUT/raw-c$CONNS.txt"
for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then order="brisk peer"; else order="peer brisk"; fi
  for t in $order; do
    if [ "$t" = brisk ]; then
      run brisk "$BRISK_PID" "$BRISK_PORT" "$BRISK_ROOM" | tee -a "$OUT/raw-c$CONNS.txt"
    else
      run axum-sqlx "$PEER_PID" "$PEER_PORT" "$PEER_ROOM" | tee -a "$OUT/raw-c$CONNS.txt"
    fi
  done
done

python3 - "$OUT/raw-c$CONNS.txt" "$ROUNDS" "$SECS" "$CONNS" "$(git rev-parse --short HEAD)" > "$OUT/table-c$CONNS.md" << 'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
rounds, secs, conns, commit = sys.argv[2:6]
print(f"`POST /api/rooms/{{id}}/messages` on PostgreSQL, {rounds} alternating rounds of {secs} s, "
      f"{conns} keep-alive connections, server on CPU 0, PostgreSQL and load on CPU 1, at {commit} "
      f"(`bash bench/api.sh {rounds} {secs} {conns}`); medians:\n")
print("| target | req/s | server CPU µs/req | PostgreSQL CPU µs/req | errors |")
print("|---|---|---|---|---|")
for target in ["brisk", "axum-sqlx"]:
    mine = [r for r in rows if r[0] == target]
    med = lambda i: statistics.median(float(r[i]) for r in mine)
    print(f"| {target} | {med(1):,.0f} | {med(2):.1f} | {med(3):.1f} | {sum(int(r[4]) for r in mine)} |")
EOF
cat "$OUT/table-c$CONNS.md"
