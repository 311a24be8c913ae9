# Shared by bench/reload.sh and bench/upgrade.sh: source it after setting URL.

# wait_up: waits (up to 10 s) until URL answers; exits the script if it does not.
wait_up() {
    for _ in $(seq 100); do
        curl -sf -o /dev/null "$URL" && return 0
        sleep 0.1
    done
    echo "server on $URL did not come up" >&2
    exit 1
}

# errors FILE: "requests, connect errors, other errors" of a brisk-bench JSON report.
errors() {
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1])); e = r["errors"]
print(r["requests"], e["connect"], e["total"] - e["connect"])' "$1"
}
