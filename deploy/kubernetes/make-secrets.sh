#!/bin/sh
# Makes the secrets deploy/kubernetes/ needs, once per deployment:
#   brisk-demo: cluster-secret (the bus's and Redis data's HMAC key), redis-url (with the
#               Redis password, for rediss://redis:6379)
#   redis:      password
#   redis-tls:  ca.crt, tls.crt, tls.key (a CA of its own, and a certificate for the Service
#               name `redis` signed by it; the demo trusts that CA only)
#
#   deploy/kubernetes/make-secrets.sh DIR           writes the files into DIR (mode 600)
#   deploy/kubernetes/make-secrets.sh DIR --apply   and creates the secrets with kubectl
#
# REDIS_TLS_NAMES (default `redis`) lists the certificate's DNS names, separated by commas.
# Keep DIR private, or delete it once the secrets exist.
set -eu
dir=${1:?usage: make-secrets.sh DIR [--apply]}
names=${REDIS_TLS_NAMES:-redis}
mkdir -p "$dir"
umask 077
cd "$dir"

printf %s "$(openssl rand -hex 32)" > cluster-secret
printf %s "$(openssl rand -hex 32)" > redis-password
printf 'rediss://:%s@redis:6379' "$(cat redis-password)" > redis-url

openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=brisk-demo Redis CA" \
    -keyout ca.key -out ca.crt 2>/dev/null
alt=$(printf '%s' "$names" | sed 's/\([^,]*\)/DNS:\1/g')
openssl req -newkey rsa:2048 -nodes -subj "/CN=redis" -keyout tls.key -out tls.csr 2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n' \
    "$alt" > tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 825 \
    -extfile tls.ext -out tls.crt 2>/dev/null
rm -f tls.csr tls.ext ca.srl

if [ "${2:-}" = --apply ]; then
    kubectl create secret generic brisk-demo \
        --from-file=cluster-secret --from-file=redis-url
    kubectl create secret generic redis --from-file=password=redis-password
    kubectl create secret generic redis-tls \
        --from-file=ca.crt --from-file=tls.crt --from-file=tls.key
fi
echo "secrets written to $dir"
