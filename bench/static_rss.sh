#!/usr/bin/env bash
# Worker RSS while CLIENTS clients download one SIZE_MIB file at once from /static/ (sent with
# sendfile in chunks of up to 2 MiB; under TLS read in 128 KiB chunks).
# Usage: bench/static_rss.sh [CLIENTS] [SIZE_MIB]
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${1:-50}
SIZE=${2:-100}
cargo build --release -q -p brisk-demo
BIN=target/release
RUN=$(mktemp -d)
mkdir -p "$RUN/static"
head -c $((SIZE << 20)) /dev/urandom > "$RUN/static/big.bin"
ARGS=(--workers 1 --run-dir "$RUN" --static-root "$RUN/static" --text text://127.0.0.1:17300
      --frame frame://127.0.0.1:17301 --http http://127.0.0.1:17302 --websocket websocket://127.0.0.1:17303)
cleanup() { "$BIN/brisk-demo" "${ARGS[@]}" stop >/dev/null 2>&1 || true; rm -rf "$RUN"; }
trap cleanup EXIT
taskset -c 0 "$BIN/brisk-demo" "${ARGS[@]}" start -d >/dev/null
PID=$("$BIN/brisk-demo" "${ARGS[@]}" status --json | python3 -c "
import json,sys; print([w['pid'] for w in json.load(sys.stdin)['workers'] if w['server'].startswith('http://')][0])")
rss() { awk '/VmRSS/ {print $2}' "/proc/$PID/status"; }
sleep 1
BEFORE=$(rss)
PEAK=$BEFORE
START=$(date +%s.%N)
for _ in $(seq 1 "$CLIENTS"); do
    taskset -c 1 curl -s -o /dev/null -w '%{http_code} %{size_download}\n' http://127.0.0.1:17302/static/big.bin >> "$RUN/curl.out" &
done
while [ "$(jobs -r | wc -l)" -gt 0 ]; do
    NOW=$(rss); [ "$NOW" -gt "$PEAK" ] && PEAK=$NOW
    sleep 0.05
done
END=$(date +%s.%N)
OK=$(grep -c "^200 $((SIZE << 20))$" "$RUN/curl.out" || true)
SECS=$(python3 -c "print(round($END - $START, 2))")
MIBS=$(python3 -c "print(round($OK * $SIZE / ($END - $START)))")
echo "| clients | file | complete | seconds | MiB/s | worker RSS before | peak | growth |"
echo "|---|---|---|---|---|---|---|---|"
echo "| $CLIENTS | $SIZE MiB | $OK | $SECS | $MIBS | $BEFORE KiB | $PEAK KiB | $((PEAK - BEFORE)) KiB |"
