#!/usr/bin/env bash
# Soak: a mixed load on the demo (2 workers per server) for a given time, with each worker's
# RSS and open descriptors sampled every minute, and once more after the load has stopped.
#
# The load, all at once, paced so that it runs for hours on a small machine:
#   - HTTP keep-alive, 50 connections, 2,000 req/s on `/`;
#   - HTTP without keep-alive, 10 connections, 300 req/s on `/json`;
#   - a static file, 10 connections, 300 req/s;
#   - WebSocket churn: 50 echo clients for 20 s, then 50 new ones, and so on;
#   - WebSocket broadcast: 100 `/chat` members, 20 messages/s, rejoining every 30 s;
#   - HTTPS: a new TLS connection per request, one after another (curl).
#
# Usage: bench/soak.sh [MINUTES] [OUT_DIR]   (default 60 minutes, bench/results/soak)
# Writes OUT_DIR/samples.csv and OUT_DIR/summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-60}
OUT=${2:-bench/results/soak}
cargo build --release -q -p brisk-demo -p brisk-bench
BIN=$PWD/target/release
RUN=$(mktemp -d)
mkdir -p "$OUT"
P=17500
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
    -keyout "$RUN/key.pem" -out "$RUN/cert.pem" 2>/dev/null
ARGS=(--workers 2 --run-dir "$RUN/run" --text "text://127.0.0.1:$P" --frame "frame://127.0.0.1:$((P + 1))"
      --http "http://127.0.0.1:$((P + 2))" --websocket "websocket://127.0.0.1:$((P + 3))"
      --tls-cert "$RUN/cert.pem" --tls-key "$RUN/key.pem" --https "https://127.0.0.1:$((P + 4))"
      --wss "wss://127.0.0.1:$((P + 5))" --tls-text "text://127.0.0.1:$((P + 6))")
HTTP="http://127.0.0.1:$((P + 2))"
LOADS=()
cleanup() {
    for pid in "${LOADS[@]}"; do kill "$pid" 2>/dev/null || true; done
    "$BIN/brisk-demo" "${ARGS[@]}" stop >/dev/null 2>&1 || true
    rm -rf "$RUN"
}
trap cleanup EXIT
taskset -c 0 "$BIN/brisk-demo" "${ARGS[@]}" start -d >/dev/null
for _ in $(seq 100); do curl -sf -o /dev/null "$HTTP/" && break; sleep 0.1; done

# One CSV row per worker: minute, server, pid, RSS KiB, open descriptors, connections.
sample() {
    "$BIN/brisk-demo" "${ARGS[@]}" status --json | python3 -c '
import json, os, sys
minute = sys.argv[1]
for w in json.load(sys.stdin)["workers"]:
    fds = len(os.listdir("/proc/%d/fd" % w["pid"]))
    print(",".join(str(v) for v in (minute, w["server"], w["pid"], w["rss_kib"], fds, w["connections"])))
' "$1" >> "$OUT/samples.csv"
}
echo "minute,server,pid,rss_kib,fds,connections" > "$OUT/samples.csv"
sample baseline

# The load runs 30 s past the last sample, so that sample is taken under load.
SECS=$((MINUTES * 60 + 30))
bench() { taskset -c 1 "$BIN/brisk-bench" "$@" > /dev/null 2>&1 || true; }
# until_end CMD...: runs CMD again and again until the soak's end.
END=$((SECONDS + SECS))
until_end() { while [ $SECONDS -lt $END ]; do "$@"; done; }
bench http -c 50 -R 2000 -d "${SECS}s" "$HTTP/" & LOADS+=($!)
bench http -c 10 -R 300 --no-keepalive -d "${SECS}s" "$HTTP/json" & LOADS+=($!)
bench http -c 10 -R 300 -d "${SECS}s" "$HTTP/static/1k.txt" & LOADS+=($!)
until_end bench ws "ws://127.0.0.1:$((P + 3))/" -c 50 --mode echo --rate 500 --hold 20s & LOADS+=($!)
until_end bench ws "ws://127.0.0.1:$((P + 2))/chat" -c 100 --mode broadcast --rate 20 --hold 30s & LOADS+=($!)
until_end taskset -c 1 curl -sk -o /dev/null "https://127.0.0.1:$((P + 4))/" & LOADS+=($!)

for m in $(seq "$MINUTES"); do
    sleep 60
    sample "$m"
done
for pid in "${LOADS[@]}"; do wait "$pid" 2>/dev/null || true; done
LOADS=()
# Connections closed by the clients leave the workers' tables within a few seconds.
sleep 15
sample after

python3 - "$OUT/samples.csv" "$MINUTES" > "$OUT/summary.md" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
minutes = int(sys.argv[2])
warm = "5" if minutes >= 10 else "1"
last = str(minutes)
by = {}
for r in rows:
    by.setdefault((r["server"], r["pid"]), {})[r["minute"]] = r
print(f"Soak of {minutes} min (bench/soak.sh). RSS growth is from minute {warm} (after warm-up) "
      f"to minute {last}; descriptors before the load and 15 s after it stopped.\n")
print("| worker | pid | RSS min " + warm + " | RSS min " + last + " | growth | fds before | fds under load | fds after |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for (server, pid), s in sorted(by.items()):
    w, l, b, a = s.get(warm), s.get(last), s.get("baseline"), s.get("after")
    if not (w and l and b and a):
        print(f"| {server} | {pid} | worker replaced during the run | | | | | |")
        continue
    growth = (int(l["rss_kib"]) - int(w["rss_kib"])) / 1024
    print(f"| {server} | {pid} | {int(w['rss_kib'])/1024:.1f} MiB | {int(l['rss_kib'])/1024:.1f} MiB "
          f"| {growth:+.2f} MiB | {b['fds']} | {l['fds']} | {a['fds']} |")
PY
cat "$OUT/summary.md"
