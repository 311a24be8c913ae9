#!/usr/bin/env bash
# Checks a running peer's database tests against the rules
# (shared/reference/techempower-rules.md) with curl, and the rows it shows or
# writes against the database itself with psql. Not a load test: about 40
# requests, one at a time.
# Usage: check-db.sh BASE_URL [DATABASE_URL]   e.g. check-db.sh http://127.0.0.1:28081
# DATABASE_URL (argument or environment) is the database the peer uses.
# Needs curl, jq, psql, python3. Prints one line per check, then "N passed, N failed".
set -uo pipefail
BASE=${1:?usage: check-db.sh BASE_URL [DATABASE_URL]}
DB=${2:-${DATABASE_URL:?DATABASE_URL is not set}}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok    $*"; }
bad() { fail=$((fail + 1)); echo "FAIL  $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
sql() { psql "$DB" -XAtq -c "$1"; }

# get PATH: body in $TMP/body, headers in $TMP/head
get() { curl -s -D "$TMP/head" -o "$TMP/body" "$BASE$1"; }
header() { grep -i "^$1:" "$TMP/head" | head -1 | cut -d: -f2- | sed 's/^ *//; s/\r$//'; }
status() { head -1 "$TMP/head" | awk '{print $2}'; }
# The JSON array length, or -1 if the body is not an array of {id, randomNumber}.
rows() { jq 'if type == "array" and all(.[]; (keys == ["id", "randomNumber"]) and (.id | type == "number") and (.randomNumber | type == "number") and .id >= 1 and .id <= 10000 and .randomNumber >= 1 and .randomNumber <= 10000) then length else -1 end' "$TMP/body" 2>/dev/null || echo -1; }

common() { # PATH TYPE: status 200, Server, Date, the content type
    local p=$1 type=$2
    check "$p: status 200" [ "$(status)" = 200 ]
    check "$p: Server header" [ -n "$(header Server)" ]
    check "$p: Date header" [ -n "$(header Date)" ]
    check "$p: Content-Type $type (got '$(header Content-Type)')" [ "$(header Content-Type | tr -d ' ' | tr A-Z a-z)" = "$(echo "$type" | tr -d ' ')" ]
}

# /db: one object, as it is in the table.
get /db
common /db application/json
check "/db: one {id, randomNumber} object" jq -e 'type == "object" and keys == ["id", "randomNumber"]' "$TMP/body" >/dev/null
id=$(jq .id "$TMP/body") n=$(jq .randomNumber "$TMP/body")
check "/db: row $id is $n in the table" [ "$(sql "SELECT randomnumber FROM world WHERE id = $id")" = "$n" ]

# /queries and /cached-queries: bounds.
for p in queries cached-queries; do
    name=queries; [ $p = cached-queries ] && name=count
    for case in ":1" "$name=:1" "$name=foo:1" "$name=0:1" "$name=-3:1" "$name=7:7" "$name=500:500" "$name=501:500" "$name=100000:500"; do
        q=${case%:*} want=${case##*:}
        get "/$p?$q"
        check "/$p?$q: $want rows" [ "$(rows)" = "$want" ]
    done
    get "/$p"
    check "/$p (no query string): 1 row" [ "$(rows)" = 1 ]
    common "/$p" application/json
done
get "/queries?queries=20"
jq -r '.[] | "\(.id) \(.randomNumber)"' "$TMP/body" > "$TMP/rows"
mism=0
while read -r id n; do [ "$(sql "SELECT randomnumber FROM world WHERE id = $id")" = "$n" ] || mism=$((mism + 1)); done < "$TMP/rows"
check "/queries?queries=20: every row as in the table ($mism differ)" [ "$mism" = 0 ]

# /updates: bounds, new values returned and persisted.
for case in ":1" "queries=:1" "queries=foo:1" "queries=0:1" "queries=501:500"; do
    q=${case%:*} want=${case##*:}
    get "/updates?$q"
    check "/updates?$q: $want rows" [ "$(rows)" = "$want" ]
done
sql "SELECT id, randomnumber FROM world ORDER BY id" > "$TMP/before"
get "/updates?queries=20"
common /updates application/json
check "/updates?queries=20: 20 rows" [ "$(rows)" = 20 ]
sql "SELECT id, randomnumber FROM world ORDER BY id" > "$TMP/after"
# The answer is what the table holds now (a row drawn twice holds its last value).
jq -r '.[] | "\(.id) \(.randomNumber)"' "$TMP/body" > "$TMP/rows"
mism=0
while read -r id n; do [ "$(sql "SELECT randomnumber FROM world WHERE id = $id")" = "$n" ] || mism=$((mism + 1)); done < "$TMP/rows"
check "/updates: the returned values are in the table ($mism differ)" [ "$mism" = 0 ]
changed=$(diff "$TMP/before" "$TMP/after" | grep -c '^>')
ids=$(cut -d' ' -f1 "$TMP/rows" | sort -u | wc -l)
# A new random number equals the old one with probability 1/10000 per row.
check "/updates: $changed of $ids rows changed, no others" [ "$changed" -le "$ids" -a "$changed" -ge $((ids - 1)) ]

# /fortunes: 13 rows, escaped, sorted by message, header row.
get /fortunes
common /fortunes "text/html; charset=utf-8"
check "/fortunes: no raw <script>" bash -c '! grep -q "<script>" "$0"' "$TMP/body"
check "/fortunes: escaped &lt;script&gt;" grep -q '&lt;script&gt;' "$TMP/body"
check "/fortunes: header row id/message" python3 - "$TMP/body" <<'EOF'
import re, sys
t = re.sub(r"\s+", "", open(sys.argv[1], encoding="utf-8").read())
sys.exit(0 if "<table><tr><th>id</th><th>message</th></tr>" in t else 1)
EOF
sql "SELECT id || E'\t' || message FROM fortune" > "$TMP/fortunes"
check "/fortunes: the table's 12 rows and id 0, sorted by message, each once" python3 - "$TMP/body" "$TMP/fortunes" <<'EOF'
import html, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
got = [(int(i), html.unescape(m)) for i, m in re.findall(r"<tr><td>\s*(\d+)\s*</td><td>(.*?)</td></tr>", page, re.S)]
want = [(int(l.split("\t", 1)[0]), l.split("\t", 1)[1]) for l in open(sys.argv[2], encoding="utf-8").read().splitlines()]
want.append((0, "Additional fortune added at request time."))
want.sort(key=lambda f: f[1].encode("utf-8"))
if got != want:
    print("got ", got, "\nwant", want)
    sys.exit(1)
EOF
check "/fortunes: the Japanese fortune in UTF-8" grep -q 'フレームワークのベンチマーク' "$TMP/body"

# /r5: two rows by id and the first five rows.
get /r5
common /r5 application/json
check "/r5: {first, second, top} with 5 rows" jq -e 'keys == ["first", "second", "top"] and (.top | length) == 5 and ([.top[].id] == [1,2,3,4,5])' "$TMP/body" >/dev/null
want_top=$(sql "SELECT id || ' ' || randomnumber FROM world ORDER BY id LIMIT 5" | tr '\n' ' ')
got_top=$(jq -r '.top[] | "\(.id) \(.randomNumber)"' "$TMP/body" | tr '\n' ' ')
check "/r5: top as in the table" [ "$want_top" = "$got_top" ]
for k in first second; do
    id=$(jq ".$k.id" "$TMP/body") n=$(jq ".$k.randomNumber" "$TMP/body")
    check "/r5: $k (row $id) as in the table" [ "$(sql "SELECT randomnumber FROM world WHERE id = $id")" = "$n" ]
done

# Date changes over time (the verifier asks twice, 3 s apart).
get /db; d1=$(header Date); sleep 2; get /db; d2=$(header Date)
check "Date changes ($d1 / $d2)" [ "$d1" != "$d2" ]

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
