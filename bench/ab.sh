#!/usr/bin/env bash
# Same-run A/B of GET / between REF and the working tree, with nginx as the yardstick: builds
# REF (in a worktree under target/, into target/ab-old, where bench/ab-*.toml look too) and the
# working tree, then runs ROUNDS rounds, each target in turn (the order reversed every round),
# one worker pinned to CPU 0 and wrk pinned to CPU 1, in each of MODES: keep-alive (100
# connections), `Connection: close` (100), and pipelined (256 connections, 16 requests per write,
# bench/pipeline.lua, as TechEmpower's plaintext test). Each run's CPU is the utime and stime of the target's whole process
# group over the measured seconds, divided by the requests answered, so it stays fair when the
# load generator saturates first. Prints, per target and mode, the median and min..max of
# req/s and of user, kernel and total µs per request, and each ratio to nginx.
#
# Usage: bench/ab.sh REF [ROUNDS]        (ROUNDS default 5; DURATION=S per run, default 8;
#        MODES="keepalive close pipelined" by default; AB_TARGET=axum for examples/axum.rs;
#        AB_PATH=/db to load another path than /; AB_EXTRA="--otlp http://127.0.0.1:4318" adds
#        flags to the working tree's command only, to measure a setting's cost against REF)
# The A/A: `bench/ab.sh HEAD` on a clean working tree builds one commit in two directories
# (builds of one source have differed by ~0.5 µs user per request on GET /; see
# bench/notes/get-user-time.md): run it beside an A/B whose difference is that small.
# Needs wrk and nginx (bench/peers/install.sh). Give the figures in the commit message of
# every change to http/, runtime/, ws/ or db/ (see the guide's Tests and the lab, docs/guide/lab.md).
set -euo pipefail
cd "$(dirname "$0")/.."
REF=${1:?usage: bench/ab.sh REF [ROUNDS]}
ROUNDS=${2:-5}
DURATION=${DURATION:-8}
PORT=${PORT:-28184}
read -r -a modes <<<"${MODES:-keepalive close pipelined}"
for tool in wrk nginx taskset; do
    command -v "$tool" >/dev/null || { echo "ab.sh: no $tool (bench/peers/install.sh)" >&2; exit 1; }
done
# shellcheck source=bench/lib/ab.sh
. bench/lib/ab.sh
ref_worktree "$REF"
# AB_TARGET=axum measures examples/axum.rs (GET / through an axum Router, the
# HttpServer::service path) instead of the demo's own fast path.
if [ "${AB_TARGET:-demo}" = axum ]; then
    build=(-p brisk --features axum,jwt --example axum)
    bin=release/examples/axum
    target_args=(--workers 1 --listen "http://127.0.0.1:$PORT")
else
    build=(-p brisk-demo)
    bin=release/brisk-demo
    target_args=(--workers 1 --http "http://127.0.0.1:$PORT" --websocket websocket://127.0.0.1:28185
        --text text://127.0.0.1:28186 --frame frame://127.0.0.1:28187)
fi
echo "building $REF ($commit) into target/ab-old, and the working tree" >&2
(cd "$worktree" && CARGO_TARGET_DIR="$repo/target/ab-old" cargo build -q --release "${build[@]}")
cargo build -q --release "${build[@]}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/static"
echo static > "$work/static/a.txt"
results=$work/results.tsv
tick=$(getconf CLK_TCK)


# Starts a target ($1 name, $2 mode, then its command), measures it, stops it.
measure() {
    local name=$1 mode=$2
    shift 2
    setsid taskset -c 0 "$@" >"$work/$name.log" 2>&1 &
    local leader=$!
    local i
    for i in $(seq 200); do
        curl -sf -o /dev/null "http://127.0.0.1:$PORT/" && break
        sleep 0.05
    done
    local load=(-t1 -c100)
    case $mode in
    close) load+=(-H "Connection: close") ;;
    pipelined) load=(-t1 -c256 -s bench/pipeline.lua) ;;
    esac
    local url=("http://127.0.0.1:$PORT${AB_PATH:-/}")
    [ "$mode" = pipelined ] && url+=(-- 16)
    taskset -c 1 wrk "${load[@]}" -d2s "${url[@]}" >/dev/null
    local before after out requests
    before=$(group_cpu "$leader")
    out=$(taskset -c 1 wrk "${load[@]}" -d"${DURATION}s" "${url[@]}")
    after=$(group_cpu "$leader")
    requests=$(grep -o '[0-9]* requests in' <<<"$out" | grep -o '^[0-9]*')
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$mode" "$requests" "$before" "$after" >>"$results"
    stop_group "$leader"
}

read -r -a extra <<<"${AB_EXTRA:-}"
targets=(brisk brisk_old nginx)
for round in $(seq "$ROUNDS"); do
    order=("${targets[@]}")
    [ $((round % 2)) = 0 ] && order=(nginx brisk_old brisk)
    for mode in "${modes[@]}"; do
        for t in "${order[@]}"; do
            echo "round $round/$ROUNDS, $mode: $t" >&2
            case $t in
            brisk) measure "$t" "$mode" "target/$bin" "${target_args[@]}" "${extra[@]}" \
                --run-dir "$work/run-$t-$round-$mode" start ;;
            brisk_old) measure "$t" "$mode" "target/ab-old/$bin" "${target_args[@]}" \
                --run-dir "$work/run-$t-$round-$mode" start ;;
            nginx) measure "$t" "$mode" bench/peers/nginx/run.sh "$PORT" 1 "$work/static" \
                "$work/run-$t-$round-$mode" ;;
            esac
        done
    done
done

python3 - "$results" "$tick" "$DURATION" "$REF" "${modes[@]}" <<'EOF'
import statistics, sys
path, tick, duration, ref = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
modes = sys.argv[5:]
runs = {}
for line in open(path):
    name, mode, requests, before, after = line.rstrip("\n").split("\t")
    (u0, k0), (u1, k1) = map(int, before.split()), map(int, after.split())
    r = int(requests)
    user = (u1 - u0) / tick * 1e6 / r
    kernel = (k1 - k0) / tick * 1e6 / r
    runs.setdefault((mode, name), []).append((r / duration, user, kernel, user + kernel))

def cell(values, fmt):
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}..{fmt(max(values))})"

import os
extra = os.environ.get("AB_EXTRA", "")
print(f"GET {os.environ.get('AB_PATH', '/')}{' (brisk: ' + extra + ')' if extra else ''}, 1 worker on CPU 0, wrk -t1 on CPU 1 (-c100; pipelined -c256, 16 deep), {duration:g} s per run; "
      f"brisk = working tree, brisk_old = {ref}; median (min..max)\n")
print("| mode | target | req/s | user µs/req | kernel µs/req | total µs/req | total / nginx | req/s / nginx |")
print("|---|---|---|---|---|---|---|---|")
for mode in modes:
    base = statistics.median(v[3] for v in runs[(mode, "nginx")])
    base_rate = statistics.median(v[0] for v in runs[(mode, "nginx")])
    for name in ("brisk", "brisk_old", "nginx"):
        v = runs[(mode, name)]
        col = lambda i: [x[i] for x in v]
        print(f"| {mode} | {name} | {cell(col(0), lambda x: f'{x:,.0f}')} "
              f"| {cell(col(1), lambda x: f'{x:.2f}')} | {cell(col(2), lambda x: f'{x:.2f}')} "
              f"| {cell(col(3), lambda x: f'{x:.2f}')} "
              f"| {statistics.median(col(3)) / base:.2f}× | {statistics.median(col(0)) / base_rate:.2f}× |")
EOF
