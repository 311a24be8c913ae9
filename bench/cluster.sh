#!/usr/bin/env bash
# The cluster lab (issue 17, item 6): broadcast across instances on one Redis.
#
# Every server process runs on CPU 0; Redis and brisk-bench on CPU 1. CPU is utime+stime from
# /proc, summed over every process of every instance and Redis, sampled after the
# connections are open (brisk-bench --settle) and after the last delivery, so connection
# set-up is not counted.
#
# 1. Cost (R1.7 without more cores): Brisk with 1, 2 and 4 instances (one worker each),
#    RECEIVERS receivers spread over them, one sender on the first publishing RATE1 msg/s for
#    SECONDS: CPU µs per delivery. Then `GET /` on every instance at once (one brisk-bench per
#    instance, 50 connections each): CPU µs per request. Efficiency = cost(1) / cost(N).
# 2. Peers: 1,000 and 10,000 receivers over 2 instances of Brisk (`/chat`, --redis),
#    Socket.IO with @socket.io/redis-adapter, and Centrifuge with its Redis broker; the sender
#    on the first instance. 1,000 receivers at 2, 20 and 200 msg/s; 10,000 at 2 and 20 (2,000
#    to 200,000 deliveries/s offered; past about 100,000 the one-core load generator is the
#    limit). Deliveries/s, p99 publish-to-delivery, CPU µs per delivery, RSS per connection
#    (the servers' RSS with the receivers open, less before).
#
#    Targets `channels` (the demo's `brisk::channels` protocol: JWT connect, subscribe to
#    `room:bench`, publish through it) and `centrifugo` (the Centrifugo server, Redis engine,
#    HS256 connect tokens, channel `room`) compare the channel protocol with its peer;
#    neither has presence or join/leave pushes on that channel, and `brisk` (`/chat`) is the
#    protocol-less baseline.
# 3. Connect + subscribe (CLUSTER_CONNECT="channels centrifugo", 10,000 connections over 2
#    instances, all at once): connections/s until the last subscribe is answered, and server
#    CPU µs per connection (JWT verified, subscription recorded).
#
# The targets alternate ROUNDS times; the tables give the medians.
#
#   bash bench/cluster.sh [ROUNDS] [SECONDS] [RECEIVERS]   # default 3 5 1000
#
# Writes bench/results/cluster/table.md (and raw.txt, every run). For a narrower run:
# CLUSTER_COST=0 skips part 1, CLUSTER_POINTS="1000:20 10000:2" and
# CLUSTER_TARGETS="brisk socketio" narrow part 2 (add brisk_old for a before/after run:
# CLUSTER_OLD_DEMO, default target/ab-old/release/brisk-demo), CLUSTER_OUT=DIR writes elsewhere.
set -euo pipefail
# A run inside $(…) that fails stops the lab instead of writing a short row.
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-5}
RECEIVERS=${3:-1000}
RATE1=20
DEMO=target/release/brisk-demo
# `brisk_old` (a target for before/after runs): the demo built from an earlier commit.
OLD_DEMO=${CLUSTER_OLD_DEMO:-target/ab-old/release/brisk-demo}
# The instances' shared secret for the bus's messages (versions before it ignore it).
export BRISK_CLUSTER_SECRET=${BRISK_CLUSTER_SECRET:-cluster-lab-secret-0123456789}
BENCH=target/release/brisk-bench
CENT=bench/peers/centrifuge/bin/peer-centrifuge
CENTRIFUGO=bench/peers/centrifugo/bin/centrifugo
cargo build --release -p brisk-demo -p brisk-bench
[ -d bench/peers/node/node_modules/socket.io ] && [ -x "$CENT" ] && [ -x "$CENTRIFUGO" ] \
  || bash bench/peers/install.sh
command -v redis-server > /dev/null || bash scripts/install-test-servers
OUT=${CLUSTER_OUT:-bench/results/cluster}
POINTS=${CLUSTER_POINTS:-1000:2 1000:20 1000:200 10000:2 10000:20}
TARGETS=${CLUSTER_TARGETS:-brisk socketio centrifuge}
CONNECT_TARGETS=${CLUSTER_CONNECT:-}
CONNECT_N=${CLUSTER_CONNECT_N:-10000}
mkdir -p "$OUT"
WORK=$(mktemp -d)
# Connect tokens: the demo's channel key (shared by its instances) and Centrifugo's HMAC
# secret; each token names user `bench` and lasts an hour.
CH_SECRET=cluster-lab-channels-secret-0123456789
printf %s "$CH_SECRET" > "$WORK/channels.key"
CF_SECRET=cluster-lab-centrifugo-secret-0123456789
hs256() {
  python3 - "$1" "$2" <<'EOF'
import base64, hashlib, hmac, json, sys, time
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
claims = {"sub": "bench", "exp": int(time.time()) + 3600}
if sys.argv[2]:
    claims["aud"] = sys.argv[2]
head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
body = b64(json.dumps(claims).encode())
sig = hmac.new(sys.argv[1].encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
print(f"{head}.{body}.{b64(sig)}")
EOF
}
CH_TOKEN=$(hs256 "$CH_SECRET" brisk-demo)
CF_TOKEN=$(hs256 "$CF_SECRET" "")
REDIS_PORT=16500
BASE_PORT=16510
TICKS=$(getconf CLK_TCK)
PAGE_KB=$(($(getconf PAGESIZE) / 1024))
# The peers' pids, one per line (a file: the runs happen in subshells).
PEERS=$WORK/peer.pids

stop_all() {
  for d in "$WORK"/brisk*; do
    # Stopped by the program that started it (`stop` signals only a master of its own program).
    [ -d "$d" ] && { "$DEMO" --run-dir "$d" stop > /dev/null 2>&1 \
      || "$OLD_DEMO" --run-dir "$d" stop > /dev/null 2>&1 || true; }
  done
  rm -rf "$WORK"/brisk*/
  if [ -f "$PEERS" ]; then
    for p in $(cat "$PEERS"); do kill -9 "$p" 2> /dev/null || true; done
    for p in $(cat "$PEERS"); do while kill -0 "$p" 2> /dev/null; do sleep 0.05; done; done
    rm -f "$PEERS"
  fi
}
cleanup() {
  stop_all
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
for _ in $(seq 100); do [ "$(redis-cli -p "$REDIS_PORT" ping 2> /dev/null)" = PONG ] && break; sleep 0.1; done

# Every process of the running servers, and Redis.
server_pids() {
  local d
  for d in "$WORK"/brisk*; do
    [ -f "$d/brisk-demo.pid" ] || continue
    local m
    m=$(cat "$d/brisk-demo.pid")
    echo "$m"
    pgrep -P "$m" || true
  done
  [ -f "$PEERS" ] && cat "$PEERS"
  return 0
}
cpu_ticks() {
  local total=0 p
  for p in $(server_pids) "$REDIS_PID"; do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat" 2> /dev/null || echo 0)))
  done
  echo "$total"
}
rss_kb() {
  local total=0 p
  for p in $(server_pids); do
    total=$((total + $(awk '{print $2}' "/proc/$p/statm" 2> /dev/null || echo 0) * PAGE_KB))
  done
  echo "$total"
}

# start TARGET N: N instances; their WebSocket URLs in URLS.
start() {
  local i port demo=$DEMO
  [ "$1" = brisk_old ] && demo=$OLD_DEMO
  URLS=()
  for i in $(seq "$2"); do
    port=$((BASE_PORT + i))
    case $1 in
      brisk | brisk_old | channels)
        taskset -c 0 "$demo" --workers 1 --http "http://127.0.0.1:$port" \
          --text text://127.0.0.1:0 --frame frame://127.0.0.1:0 \
          --websocket websocket://127.0.0.1:0 --redis "redis://127.0.0.1:$REDIS_PORT" \
          --channels-secret-file "$WORK/channels.key" \
          --run-dir "$WORK/brisk$i" start -d > "$WORK/brisk$i.log" 2>&1
        if [ "$1" = channels ]; then
          URLS+=("ws://127.0.0.1:$port/connection/websocket")
        else
          URLS+=("ws://127.0.0.1:$port/chat")
        fi
        ;;
      centrifugo)
        cat > "$WORK/centrifugo$i.json" <<EOF
{"http_server": {"address": "127.0.0.1", "port": $port},
 "log": {"level": "error"}, "usage_stats": {"disabled": true},
 "engine": {"type": "redis", "redis": {"address": ["redis://127.0.0.1:$REDIS_PORT"]}},
 "client": {"token": {"hmac_secret_key": "$CF_SECRET"}, "allowed_origins": ["*"]},
 "channel": {"without_namespace": {"allow_subscribe_for_client": true,
                                   "allow_publish_for_subscriber": true}}}
EOF
        taskset -c 0 "$CENTRIFUGO" -c "$WORK/centrifugo$i.json" > "$WORK/centrifugo$i.log" 2>&1 &
        echo $! >> "$PEERS"
        URLS+=("ws://127.0.0.1:$port/connection/websocket")
        ;;
      socketio)
        taskset -c 0 node bench/peers/node/socketio.js "$port" "redis://127.0.0.1:$REDIS_PORT" \
          > "$WORK/socketio$i.log" 2>&1 &
        echo $! >> "$PEERS"
        URLS+=("ws://127.0.0.1:$port/socket.io/?EIO=4&transport=websocket")
        ;;
      centrifuge)
        taskset -c 0 "$CENT" -addr "127.0.0.1:$port" -redis "127.0.0.1:$REDIS_PORT" \
          > "$WORK/centrifuge$i.log" 2>&1 &
        echo $! >> "$PEERS"
        URLS+=("ws://127.0.0.1:$port/connection/websocket")
        ;;
    esac
  done
}
wait_listening() {
  local i
  for i in $(seq "$1"); do
    for _ in $(seq 100); do
      (exec 3<> "/dev/tcp/127.0.0.1/$((BASE_PORT + i))") 2> /dev/null && continue 2
      sleep 0.1
    done
    echo "nothing listens on port $((BASE_PORT + i)) after 10 s" >&2
    return 1
  done
}

# launch TARGET N: N instances started and listening; what brisk-bench is to be given in
# TARGET_ARGS: their URLs (the first, then --spread) and the protocol it speaks to them.
launch() {
  start "$1" "$2"
  wait_listening "$2"
  TARGET_ARGS=("${URLS[0]}")
  for u in "${URLS[@]:1}"; do TARGET_ARGS+=(--spread "$u"); done
  case $1 in
    socketio) TARGET_ARGS+=(--protocol socketio) ;;
    centrifuge) TARGET_ARGS+=(--protocol centrifuge) ;;
    centrifugo) TARGET_ARGS+=(--protocol centrifuge --token "$CF_TOKEN" --channel room) ;;
    channels) TARGET_ARGS+=(--protocol brisk --token "$CH_TOKEN" --channel room:bench) ;;
    *) TARGET_ARGS+=(--protocol plain) ;;
  esac
}

# connect_rate TARGET N CONNECTIONS -> "connections/s cpu_us_per_connection failed"
connect_rate() {
  local target=$1 n=$2 c=$3 c0 c1 t0 t1
  launch "$target" "$n"
  rm -f "$WORK/ready"
  c0=$(cpu_ticks)
  t0=$(date +%s%N)
  taskset -c 1 "$BENCH" ws "${TARGET_ARGS[@]}" -c "$c" --timeout 20s --hold 1s \
    --settle 1s --json --ready-file "$WORK/ready" > "$WORK/ws.json" &
  local bench=$!
  while [ ! -f "$WORK/ready" ] && kill -0 "$bench" 2> /dev/null; do sleep 0.01; done
  t1=$(date +%s%N)
  c1=$(cpu_ticks)
  wait "$bench"
  stop_all
  python3 - "$WORK/ws.json" "$TICKS" "$c0" "$c1" "$t0" "$t1" "$c" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
t, c0, c1, t0, t1, c = float(sys.argv[2]), *map(float, sys.argv[3:8])
ok = max(j["connections"]["succeeded"], 1)
print(round(ok / ((t1 - t0) / 1e9)), round((c1 - c0) / t * 1e6 / ok, 1), int(c) - ok)
EOF
}

# broadcast TARGET N RECEIVERS RATE -> "delivered/s p99_ms cpu_us_per_delivery rss_kb_per_conn lost"
broadcast() {
  local target=$1 n=$2 r=$3 rate=$4 rss0 rss1 c0 c1
  launch "$target" "$n"
  rss0=$(rss_kb)
  rm -f "$WORK/ready" "$WORK/done"
  taskset -c 1 "$BENCH" ws "${TARGET_ARGS[@]}" -c "$r" --ramp 5000 \
    --mode broadcast --rate "$rate" --hold "${SECS}s" --settle 2s --drain 5s --json \
    --ready-file "$WORK/ready" --done-file "$WORK/done" > "$WORK/ws.json" &
  local bench=$!
  # Every receiver open: the memory they hold; the CPU count starts just before the first
  # message (the settle time is 2 s).
  while [ ! -f "$WORK/ready" ] && kill -0 "$bench" 2> /dev/null; do sleep 0.05; done
  rss1=$(rss_kb)
  sleep 1.8
  c0=$(cpu_ticks)
  # The last delivery, before the receivers close (their closing is not counted).
  while [ ! -f "$WORK/done" ] && kill -0 "$bench" 2> /dev/null; do sleep 0.02; done
  c1=$(cpu_ticks)
  wait "$bench"
  stop_all
  python3 - "$WORK/ws.json" "$TICKS" "$c0" "$c1" "$rss0" "$rss1" "$r" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
t, c0, c1, rss0, rss1, r = float(sys.argv[2]), *map(float, sys.argv[3:8])
m = j["messages"]
d = max(m["delivered"], 1)
p99 = j["latency_us"]["p99"] / 1000 if j.get("latency_us") else float("nan")
print(round(m["delivered_per_sec"]), round(p99, 2), round((c1 - c0) / t * 1e6 / d, 3),
      round((rss1 - rss0) / r, 2), m["expected"] - m["delivered"])
EOF
}

# http N -> "req/s cpu_us_per_request": GET / on every instance at once.
http_cost() {
  local n=$1 i c0 c1 pids=()
  start brisk "$n"
  wait_listening "$n"
  c0=$(cpu_ticks)
  for i in $(seq "$n"); do
    taskset -c 1 "$BENCH" http -c 50 -d "${SECS}s" --json "http://127.0.0.1:$((BASE_PORT + i))/" \
      > "$WORK/http$i.json" &
    pids+=($!)
  done
  wait "${pids[@]}"
  c1=$(cpu_ticks)
  stop_all
  python3 - "$TICKS" "$c0" "$c1" "$WORK"/http*.json <<'EOF'
import json, sys
t, c0, c1 = map(float, sys.argv[1:4])
runs = [json.load(open(f)) for f in sys.argv[4:]]
n = sum(j["requests"] for j in runs)
print(round(sum(j["rps"] for j in runs)), round((c1 - c0) / t * 1e6 / max(n, 1), 3))
EOF
  rm -f "$WORK"/http*.json
}

: > "$OUT/raw.txt"
for round in $(seq "$ROUNDS"); do
  for n in 1 2 4; do
    [ "${CLUSTER_COST:-1}" = 0 ] && break
    row=$(broadcast brisk "$n" "$RECEIVERS" "$RATE1")
    echo "cost $n $row" | tee -a "$OUT/raw.txt"
    row=$(http_cost "$n")
    echo "http $n $row" | tee -a "$OUT/raw.txt"
  done
  order=$TARGETS
  [ $((round % 2)) = 0 ] && order=$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for point in $POINTS; do
    r=${point%:*} rate=${point#*:}
    for t in $order; do
      row=$(broadcast "$t" 2 "$r" "$rate")
      echo "peer $t $r $rate $row" | tee -a "$OUT/raw.txt"
    done
  done
  for t in $CONNECT_TARGETS; do
    row=$(connect_rate "$t" 2 "$CONNECT_N")
    echo "connect $t $CONNECT_N $row" | tee -a "$OUT/raw.txt"
  done
done

python3 - "$OUT/raw.txt" "$ROUNDS" "$SECS" "$RECEIVERS" "$RATE1" > "$OUT/table.md" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
rounds, secs, receivers, rate1 = sys.argv[2:6]
med = lambda xs: statistics.median(float(x) for x in xs)
print(f"## Cost per delivery and per request, Brisk on 1, 2 and 4 instances (medians of {rounds} rounds)")
print()
print(f"{receivers} receivers spread over the instances, {rate1} msg/s for {secs} s; `GET /` with 50 connections per instance.")
print("CPU summed over every process of every instance and Redis.")
print()
print("| instances | deliveries/s | p99 ms | CPU µs/delivery | efficiency | req/s | CPU µs/request | efficiency |")
print("|---|---|---|---|---|---|---|---|")
base = {}
for n in ("1", "2", "4"):
    c = [r[2:] for r in rows if r[0] == "cost" and r[1] == n]
    h = [r[2:] for r in rows if r[0] == "http" and r[1] == n]
    if not c or not h:
        continue
    cd, ch = med(x[2] for x in c), med(x[1] for x in h)
    base.setdefault("d", cd); base.setdefault("h", ch)
    print(f"| {n} | {med(x[0] for x in c):,.0f} | {med(x[1] for x in c):.2f} | {cd:.3f} | "
          f"{base['d'] / cd:.2f} | {med(x[0] for x in h):,.0f} | {ch:.3f} | {base['h'] / ch:.2f} |")
print()
print(f"## Broadcast over 2 instances against the peers (medians of {rounds} rounds)")
print()
print("| receivers | msg/s sent | server | deliveries/s | p99 ms | CPU µs/delivery | RSS KiB/connection | not delivered |")
print("|---|---|---|---|---|---|---|---|")
for r in ("1000", "10000"):
    rates = sorted({x[3] for x in rows if x[0] == "peer" and x[2] == r}, key=float)
    for rate in rates:
        for t in ("brisk", "brisk_old", "channels", "socketio", "centrifuge", "centrifugo"):
            m = [x[4:] for x in rows if x[0] == "peer" and x[1] == t and x[2] == r and x[3] == rate]
            if not m:
                continue
            print(f"| {int(r):,} | {rate} | {t} | {med(x[0] for x in m):,.0f} | {med(x[1] for x in m):.2f} | "
                  f"{med(x[2] for x in m):.3f} | {med(x[3] for x in m):.2f} | {med(x[4] for x in m):,.0f} |")
conn = [x for x in rows if x[0] == "connect"]
if conn:
    print()
    print(f"## Connect + subscribe over 2 instances, all at once (medians of {rounds} rounds)")
    print()
    print("Wall time from the load generator's start until every connection's subscribe is answered;")
    print("CPU of both instances and Redis over that time. Brisk and Centrifugo verify an HS256 JWT.")
    print()
    print("| connections | server | connections/s | CPU µs/connection | failed |")
    print("|---|---|---|---|---|")
    for t in ("channels", "centrifugo", "brisk", "centrifuge", "socketio"):
        m = [x[3:] for x in conn if x[1] == t]
        if m:
            print(f"| {int(conn[0][2]):,} | {t} | {med(x[0] for x in m):,.0f} | "
                  f"{med(x[1] for x in m):.1f} | {med(x[2] for x in m):,.0f} |")
EOF
cat "$OUT/table.md"
