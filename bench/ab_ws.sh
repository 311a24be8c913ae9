#!/usr/bin/env bash
# Same-run A/B of the WebSocket paths between REF and the working tree (bench/ab.sh's
# companion for changes to ws/): builds REF (in a worktree under target/, into target/ab-old)
# and the working tree, then runs ROUNDS rounds, each build in turn (the order reversed every
# round), the demo with one worker per listener pinned to CPU 0 and brisk-bench pinned to
# CPU 1, in each of MODES:
#   echo       50 connections on the websocket:// listener, 40,000 echoes/s in all;
#   broadcast  200 members of the demo's /chat room, one sender at 500 messages/s;
#   open       6,000 /chat connections opened (handshake, on_open, join), held 1 s, closed.
# Each run's CPU is the utime and stime of the demo's whole process group over the load,
# divided by the messages delivered (echo, broadcast: per delivery) or the connections
# opened (open). Prints, per mode and build, the median and min..max of user, kernel and
# total µs, and new / old. No WebSocket peer serves these paths, so the old build is the
# yardstick: give the figures in the commit message of every change to ws/.
#
# Usage: bench/ab_ws.sh REF [ROUNDS]      (ROUNDS default 5; MODES="echo broadcast open")
set -euo pipefail
cd "$(dirname "$0")/.."
REF=${1:?usage: bench/ab_ws.sh REF [ROUNDS]}
ROUNDS=${2:-5}
HTTP=${PORT:-28184}
WS=$((HTTP + 1))
read -r -a modes <<<"${MODES:-echo broadcast open}"
# shellcheck source=bench/lib/ab.sh
. bench/lib/ab.sh
ref_worktree "$REF"
echo "building $REF ($commit) into target/ab-old, and the working tree" >&2
(cd "$worktree" && CARGO_TARGET_DIR="$repo/target/ab-old" cargo build -q --release -p brisk-demo)
cargo build -q --release -p brisk-demo -p brisk-bench
bench=target/release/brisk-bench

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.tsv
tick=$(getconf CLK_TCK)


# Starts build $1 (its binary $3) for mode $2, loads it, records its CPU, stops it.
measure() {
    local name=$1 mode=$2 bin=$3 i
    setsid taskset -c 0 "$bin" --workers 1 --http "http://127.0.0.1:$HTTP" \
        --websocket "websocket://127.0.0.1:$WS" --text "text://127.0.0.1:$((HTTP + 2))" \
        --frame "frame://127.0.0.1:$((HTTP + 3))" --run-dir "$work/run-$name" start \
        >"$work/$name.log" 2>&1 &
    local leader=$!
    for i in $(seq 200); do
        curl -sf -o /dev/null "http://127.0.0.1:$HTTP/" && break
        sleep 0.05
    done
    local load
    case $mode in
    echo) load=("ws://127.0.0.1:$WS/" -c 50 --mode echo --rate 40000 --hold 5s) ;;
    broadcast) load=("ws://127.0.0.1:$HTTP/chat" -c 200 --mode broadcast --rate 500 --hold 5s) ;;
    open) load=("ws://127.0.0.1:$HTTP/chat" -c 6000 --mode hold --hold 1s) ;;
    esac
    local before after out count
    before=$(group_cpu "$leader")
    out=$(taskset -c 1 "$bench" ws "${load[@]}" --json)
    after=$(group_cpu "$leader")
    count=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); m=r.get("messages")
print(m["delivered"] if m and sys.argv[2] != "open" else r["connections"]["succeeded"])' "$out" "$mode")
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$mode" "$count" "$before" "$after" >>"$results"
    stop_group "$leader"
}

for round in $(seq "$ROUNDS"); do
    order=(new old)
    [ $((round % 2)) = 0 ] && order=(old new)
    for mode in "${modes[@]}"; do
        for t in "${order[@]}"; do
            echo "round $round/$ROUNDS, $mode: $t" >&2
            case $t in
            new) measure new "$mode" target/release/brisk-demo ;;
            old) measure old "$mode" target/ab-old/release/brisk-demo ;;
            esac
        done
    done
done

python3 - "$results" "$tick" "$REF" "${modes[@]}" <<'EOF'
import statistics, sys
path, tick, ref = sys.argv[1], float(sys.argv[2]), sys.argv[3]
modes = sys.argv[4:]
runs = {}
for line in open(path):
    name, mode, count, before, after = line.rstrip("\n").split("\t")
    (u0, k0), (u1, k1) = map(int, before.split()), map(int, after.split())
    n = max(int(count), 1)
    user, kernel = (u1 - u0) / tick * 1e6 / n, (k1 - k0) / tick * 1e6 / n
    runs.setdefault((mode, name), []).append((n, user, kernel, user + kernel))

def cell(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}..{max(values):.2f})"

print(f"demo, 1 worker per listener on CPU 0, brisk-bench on CPU 1; new = working tree, "
      f"old = {ref}; µs of the demo's CPU per delivery (echo, broadcast) or per connection "
      f"opened (open); median (min..max)\n")
print("| mode | build | count | user µs | kernel µs | total µs | new / old |")
print("|---|---|---|---|---|---|---|")
for mode in modes:
    old = statistics.median(v[3] for v in runs[(mode, "old")])
    for name in ("new", "old"):
        v = runs[(mode, name)]
        col = lambda i: [x[i] for x in v]
        ratio = f"{statistics.median(col(3)) / old:.2f}×" if name == "new" else ""
        print(f"| {mode} | {name} | {statistics.median(col(0)):,.0f} | {cell(col(1))} "
              f"| {cell(col(2))} | {cell(col(3))} | {ratio} |")
EOF
