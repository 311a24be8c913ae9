#!/usr/bin/env bash
# The job-queue lab: Brisk's Redis queue (examples/queue_lab.rs) against BullMQ on Node.js
# (bench/peers/node/queue.js) on one Redis, the same job on both sides ({"n":1000} → 1² + … +
# 1000²), the consumer on CPU 0, the producer or load generator and Redis on CPU 1.
#
# 1. Throughput, enqueue to done: a producer pushes JOBS jobs, 50 at a time, while a consumer
#    (Brisk: a custom process; BullMQ: a Worker) runs them with concurrency 1 and then 4; the
#    time runs from the first push until nothing is queued or running. CPU µs per job for the
#    consumer, the producer and Redis (utime+stime from /proc; the producer reports its own,
#    its start included). Then the consumer alone: JOBS jobs pushed first, a consumer started,
#    timed from its first take until the queue is empty.
# 2. Enqueue cost on a request: `GET /` against `GET /enqueue` (the same answer after pushing
#    a job) on a one-process HTTP server, brisk-bench with CONNECTIONS keep-alive connections
#    for SECONDS; CPU µs per request of the server and of Redis.
#
# The targets alternate ROUNDS times; the tables give the medians.
#
#   bash bench/queue.sh [JOBS] [ROUNDS] [SECONDS] [CONNECTIONS]   # default 20000 3 5 50
#
# Writes bench/results/queue/table.md (and raw.txt, every round).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${1:-20000}
ROUNDS=${2:-3}
SECS=${3:-5}
CONNS=${4:-50}
LAB=target/release/examples/queue_lab
BENCH=target/release/brisk-bench
NODE_LAB=bench/peers/node/queue.js
[ -x "$LAB" ] || cargo build --release -p brisk --features redis --example queue_lab
[ -x "$BENCH" ] || cargo build --release -p brisk-bench
[ -d bench/peers/node/node_modules/bullmq ] && [ -d bench/peers/node/node_modules/ioredis ] \
  || bash bench/peers/install.sh
command -v redis-server >/dev/null || bash scripts/install-test-servers
OUT=bench/results/queue
mkdir -p "$OUT"
WORK=$(mktemp -d)
REDIS_PORT=16390
HTTP_PORT=16391
export LAB_REDIS=redis://127.0.0.1:$REDIS_PORT LAB_RUN_DIR=$WORK/brisk
mkdir -p "$LAB_RUN_DIR"
TICKS=$(getconf CLK_TCK)
cleanup() {
  "$LAB" stop > /dev/null 2>&1 || true
  [ -f "$WORK/node.pid" ] && kill -9 "$(cat "$WORK/node.pid")" 2> /dev/null || true
  if [ -n "${REDIS_PID:-}" ]; then
    kill -9 "$REDIS_PID" 2> /dev/null || true
    wait "$REDIS_PID" 2> /dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

taskset -c 1 redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --daemonize no > "$WORK/redis.log" 2>&1 &
REDIS_PID=$!
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
for _ in $(seq 100); do [ "$(rcli ping 2> /dev/null)" = PONG ] && break; sleep 0.1; done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
clients() { rcli client list | wc -l; }

# start TARGET (brisk|bullmq) MODE (work|serve) [CONSUMERS] -> prints the pid that does the work
start() {
  local before
  before=$(clients)
  if [ "$1" = brisk ]; then
    if [ "$2" = work ]; then
      LAB_CONSUMERS=$3 taskset -c 0 "$LAB" start -d > /dev/null
    else
      LAB_HTTP=http://127.0.0.1:$HTTP_PORT taskset -c 0 "$LAB" start -d > /dev/null
    fi
    for _ in $(seq 100); do "$LAB" status --json > /dev/null 2>&1 && break; sleep 0.1; done
    "$LAB" status --json | python3 -c \
      "import json,sys; print(json.load(sys.stdin)['workers'][0]['pid'])"
  else
    LAB_CONSUMERS=${3:-1} LAB_HTTP=$HTTP_PORT taskset -c 0 node "$NODE_LAB" "$2" \
      > "$WORK/node.log" 2>&1 &
    echo $! > "$WORK/node.pid"
    # Ready once it holds its Redis connections (a Worker opens two).
    for _ in $(seq 100); do [ "$(clients)" -gt "$before" ] && break; sleep 0.05; done
    cat "$WORK/node.pid"
  fi
}

# stop TARGET PID: stops it and waits until its process is gone.
stop() {
  if [ "$1" = brisk ]; then
    "$LAB" stop > /dev/null
  else
    kill "$2" 2> /dev/null || true
    for _ in $(seq 20); do kill -0 "$2" 2> /dev/null || break; sleep 0.05; done
    kill -9 "$2" 2> /dev/null || true
    rm -f "$WORK/node.pid"
  fi
  while kill -0 "$2" 2> /dev/null; do sleep 0.05; done
}

# throughput TARGET CONSUMERS -> "jobs/s consumer-µs producer-µs redis-µs" per job
throughput() {
  local pid c0 r0 c1 r1 json
  rcli flushall > /dev/null
  pid=$(start "$1" work "$2")
  c0=$(cpu_ticks "$pid"); r0=$(cpu_ticks "$REDIS_PID")
  if [ "$1" = brisk ]; then
    json=$(taskset -c 1 "$LAB" push "$JOBS" 50)
  else
    json=$(taskset -c 1 node "$NODE_LAB" push "$JOBS" 50)
  fi
  c1=$(cpu_ticks "$pid"); r1=$(cpu_ticks "$REDIS_PID")
  stop "$1" "$pid"
  python3 -c "
import json, sys
j = json.loads(sys.argv[1]); t = float(sys.argv[2]); n = j['jobs']
per = lambda ticks: ticks / t * 1e6 / n
print(round(n / j['seconds']), round(per(float(sys.argv[4]) - float(sys.argv[3])), 2),
      round(j['cpu_seconds'] * 1e6 / n, 2), round(per(float(sys.argv[6]) - float(sys.argv[5])), 2))
" "$json" "$TICKS" "$c0" "$c1" "$r0" "$r1"
}

# drain TARGET CONSUMERS -> "jobs/s": a consumer started on a queue filled with JOBS jobs, timed
# from its first take until the queue is empty
drain() {
  local pid waiter json
  rcli flushall > /dev/null
  if [ "$1" = brisk ]; then
    taskset -c 1 "$LAB" fill "$JOBS" 50 > /dev/null
    taskset -c 1 "$LAB" drain > "$WORK/drain.json" &
  else
    taskset -c 1 node "$NODE_LAB" fill "$JOBS" 50 > /dev/null
    taskset -c 1 node "$NODE_LAB" drain > "$WORK/drain.json" &
  fi
  waiter=$!
  pid=$(start "$1" work "$2")
  wait "$waiter"
  stop "$1" "$pid"
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(round(j['jobs']/j['seconds']))" \
    "$WORK/drain.json"
}

# enqueue TARGET PATH -> "req/s server-µs redis-µs" per request
enqueue() {
  local pid s0 r0 s1 r1 json
  rcli flushall > /dev/null
  pid=$(start "$1" serve)
  taskset -c 1 "$BENCH" http -c "$CONNS" -d 1s "http://127.0.0.1:$HTTP_PORT$2" > /dev/null
  s0=$(cpu_ticks "$pid"); r0=$(cpu_ticks "$REDIS_PID")
  json=$(taskset -c 1 "$BENCH" http -c "$CONNS" -d "${SECS}s" --json "http://127.0.0.1:$HTTP_PORT$2")
  s1=$(cpu_ticks "$pid"); r1=$(cpu_ticks "$REDIS_PID")
  stop "$1" "$pid"
  python3 -c "
import json, sys
j = json.loads(sys.argv[1]); t = float(sys.argv[2]); n = max(j['requests'], 1)
per = lambda ticks: ticks / t * 1e6 / n
if j['errors']['total']:
    print(f'{sys.argv[7]}: {j["errors"]} errors', file=sys.stderr)
print(round(j['rps']), round(per(float(sys.argv[4]) - float(sys.argv[3])), 2),
      round(per(float(sys.argv[6]) - float(sys.argv[5])), 2))
" "$json" "$TICKS" "$s0" "$s1" "$r0" "$r1" "$1 $2"
}

: > "$OUT/raw.txt"
for r in $(seq "$ROUNDS"); do
  order="brisk bullmq"
  [ $((r % 2)) = 0 ] && order="bullmq brisk"
  for t in $order; do
    for c in 1 4; do
      echo "throughput $t $c $(throughput "$t" "$c")" | tee -a "$OUT/raw.txt"
      echo "drain $t $c $(drain "$t" "$c")" | tee -a "$OUT/raw.txt"
    done
    for p in / /enqueue; do
      echo "enqueue $t $p $(enqueue "$t" "$p")" | tee -a "$OUT/raw.txt"
    done
  done
done

python3 - "$OUT/raw.txt" "$JOBS" "$SECS" "$CONNS" "$ROUNDS" > "$WORK/table" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = lambda xs: statistics.median(float(x) for x in xs)
jobs, secs, conns, rounds = sys.argv[2:6]
print(f"## Throughput, enqueue to done: {int(jobs):,} jobs pushed 50 at a time (medians of {rounds} rounds)")
print()
print("| queue | concurrency | jobs/s | consumer CPU µs/job | producer CPU µs/job | Redis CPU µs/job | jobs/s draining a full queue |")
print("|---|---|---|---|---|---|---|")
for t in ("brisk", "bullmq"):
    for c in ("1", "4"):
        m = [r[3:] for r in rows if r[0] == "throughput" and r[1] == t and r[2] == c]
        d = [r[3] for r in rows if r[0] == "drain" and r[1] == t and r[2] == c]
        print(f"| {t} | {c} | {med(x[0] for x in m):,.0f} | {med(x[1] for x in m):.1f} | "
              f"{med(x[2] for x in m):.1f} | {med(x[3] for x in m):.1f} | {med(d):,.0f} |")
print()
print(f"## Enqueue cost on a request: `GET /` and `GET /enqueue`, {conns} connections, {secs} s (medians of {rounds} rounds)")
print()
print("| server | path | req/s | server CPU µs/req | Redis CPU µs/req |")
print("|---|---|---|---|---|")
cost = {}
for t in ("brisk", "bullmq"):
    for p in ("/", "/enqueue"):
        m = [r[3:] for r in rows if r[0] == "enqueue" and r[1] == t and r[2] == p]
        rps, server, redis = med(x[0] for x in m), med(x[1] for x in m), med(x[2] for x in m)
        cost[(t, p)] = (server, redis)
        print(f"| {t} | `{p}` | {rps:,.0f} | {server:.1f} | {redis:.1f} |")
print()
for t in ("brisk", "bullmq"):
    s = cost[(t, "/enqueue")][0] - cost[(t, "/")][0]
    r = cost[(t, "/enqueue")][1] - cost[(t, "/")][1]
    print(f"- {t}: enqueueing adds {s:.1f} µs of server CPU and {r:.1f} µs of Redis CPU per request.")
EOF
{
  echo "# Job queue: Brisk's queue against BullMQ $(node -e "console.log(require('./bench/peers/node/node_modules/bullmq/package.json').version)") (Node.js $(node --version)), Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), consumer and server on CPU 0, producer, brisk-bench and Redis on CPU 1"
  echo
  cat "$WORK/table"
  echo
  echo "Command: \`bash bench/queue.sh $JOBS $ROUNDS $SECS $CONNS\` ($(date -u +%Y-%m-%d)). Every round: \`raw.txt\`."
} | tee "$OUT/table.md"
