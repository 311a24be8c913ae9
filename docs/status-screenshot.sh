#!/usr/bin/env bash
# Takes docs/status-page.png: the demo's /status page under load, in headless Chromium
# (Debian's `chromium`). The demo runs 2 workers per server on CPU 0 with a p99 alert at 5 ms;
# brisk-bench on CPU 1 sends 3 minutes of load in phases (a steady 15k requests/s, then as fast
# as it can, then slow 20 ms responses that fire the alert, then GET / again) so the charts show
# each. The screenshot is taken during the last phase, while Chromium itself competes for the
# two CPUs (the loop lag at the right edge of its chart is partly that).
#
#   bash docs/status-screenshot.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=target/release/brisk-demo
BENCH=target/release/brisk-bench
[ -x "$DEMO" ] && [ -x "$BENCH" ] || cargo build --release -p brisk-demo -p brisk-bench
command -v chromium >/dev/null || { echo "install Debian's chromium first" >&2; exit 1; }
WORK=$(mktemp -d)
trap '"$DEMO" --run-dir "$WORK" stop >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
HTTP=18480
METRICS=19480
taskset -c 0 "$DEMO" --workers 2 --http "http://127.0.0.1:$HTTP" --text text://127.0.0.1:0 \
  --frame frame://127.0.0.1:0 --websocket websocket://127.0.0.1:0 --run-dir "$WORK" \
  --metrics "http://127.0.0.1:$METRICS" --alert-p99-ms 5 --alert-hold-s 5 start -d
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$METRICS/" >/dev/null && break
  sleep 0.1
done
load() { taskset -c 1 "$BENCH" http "$@" >/dev/null; }
load -c 20 -R 15000 -d 45s "http://127.0.0.1:$HTTP/"
load -c 50 -d 45s "http://127.0.0.1:$HTTP/"
load -c 40 -d 45s "http://127.0.0.1:$HTTP/upstream?ms=20"
load -c 30 -R 10000 -d 60s "http://127.0.0.1:$HTTP/" &
sleep 40
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1250 \
  --screenshot=docs/status-page.png "http://127.0.0.1:$METRICS/status" 2>/dev/null
wait
echo "wrote docs/status-page.png"
