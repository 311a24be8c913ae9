#!/usr/bin/env bash
# Installs the peers of the brisk-bench suite from package registries only
# (apt-get, npm, the Go module proxy). Idempotent: re-running changes nothing
# once everything is present.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

need_apt=()
command -v nginx >/dev/null || need_apt+=(nginx-light)
command -v wrk >/dev/null || need_apt+=(wrk)
command -v php-fpm8.2 >/dev/null || command -v php-fpm >/dev/null || need_apt+=(php-fpm)
# PHP peer's database tests: PDO pgsql, and APCu for /cached-queries.
dpkg -s php-pgsql >/dev/null 2>&1 || need_apt+=(php-pgsql)
dpkg -s php-apcu >/dev/null 2>&1 || need_apt+=(php-apcu)
# PHP peer's templates (R2): Twig from Debian's packages.
dpkg -s php-twig >/dev/null 2>&1 || need_apt+=(php-twig)
# check-db.sh (checking a peer's database tests) needs jq and psql.
command -v jq >/dev/null || need_apt+=(jq)
command -v psql >/dev/null || need_apt+=(postgresql-client)
command -v node >/dev/null || need_apt+=(nodejs npm)
command -v npm >/dev/null || need_apt+=(npm)
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || need_apt+=(golang-go)
if [ ${#need_apt[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
# apt may start the packaged services; the suite starts its own instances.
for svc in nginx php8.2-fpm; do $SUDO service "$svc" stop >/dev/null 2>&1 || true; done

# Node.js peer: ws, pg, ejs, bullmq with ioredis (the job-queue lab), and socket.io with
# its Redis adapter (the cluster lab) from npm.
if [ ! -d "$HERE/node/node_modules/ws" ] || [ ! -d "$HERE/node/node_modules/pg" ] \
    || [ ! -d "$HERE/node/node_modules/bullmq" ] || [ ! -d "$HERE/node/node_modules/ioredis" ] \
    || [ ! -d "$HERE/node/node_modules/ejs" ] || [ ! -d "$HERE/node/node_modules/socket.io" ] \
    || [ ! -d "$HERE/node/node_modules/@socket.io/redis-adapter" ]; then
    (cd "$HERE/node" && npm install --no-audit --no-fund --silent)
fi

# Go peer: coder/websocket from the module proxy, built into go/bin.
GO=$(command -v go || echo /usr/local/go/bin/go)
(cd "$HERE/go" && "$GO" mod download && "$GO" build -o bin/peer-go .)
# Centrifuge peer (the cluster lab): the centrifuge library with its Redis broker.
(cd "$HERE/centrifuge" && "$GO" mod download && "$GO" build -o bin/peer-centrifuge .)
# Centrifugo, the server (the channel protocol's peer), from its Go module.
[ -x "$HERE/centrifugo/bin/centrifugo" ] \
    || GOBIN="$HERE/centrifugo/bin" "$GO" install github.com/centrifugal/centrifugo/v6@v6.9.1

# actix-http peer (the database tests): its own cargo workspace, built into target/peers.
REPO=$(cd "$HERE/../.." && pwd)
CARGO_TARGET_DIR="$REPO/target/peers" cargo build -q --release \
    --manifest-path "$HERE/actix-http/Cargo.toml"

echo "peers ready: nginx $(nginx -v 2>&1 | sed 's/.*\///'), node $(node --version), $("$GO" version | awk '{print $3}'), php-fpm, wrk"
