#!/usr/bin/env bash
# make-certs.sh - make a private certificate authority (CA) for one Dask cluster, a
# certificate + key for each role (scheduler, worker, client) signed by it, and a Dask
# security file that points at them.
#
# Usage:
#   cluster/tls/make-certs.sh [-o DIR] [--host NAME_OR_IP]... [--days N]
#
#   -o, --out DIR        output directory (default ./dask-tls; created with mode 700)
#   --host NAME_OR_IP    put this host name / IP in the certificates' subjectAltName
#                        (repeatable; default localhost and 127.0.0.1). Dask itself does
#                        not check host names - trust comes from the private CA - but
#                        other TLS tools do.
#   --days N             validity in days (default 365)
#
# Writes DIR/ca.pem, DIR/ca-key.pem, DIR/{scheduler,worker,client}.pem and *-key.pem
# (keys mode 600) and DIR/dask-security.yaml (absolute paths). Then:
#   cluster/start-cluster.sh --tls-config DIR/dask-security.yaml ...
#   toyengine run STUDY --store S --scheduler tls://HOST:8786 --tls-config DIR/dask-security.yaml
#   toyengine submit ... --tls-config DIR/dask-security.yaml
# Everyone holding a certificate signed by ca-key.pem can join the cluster and run code
# on it: keep DIR private (it is, mode 700) and make a new CA per cluster/user.
#
# Uses openssl when it is installed; otherwise falls back to Python's 'cryptography'
# package (`toyengine cluster make-certs`). Without either there is no TLS: install one
# (the temporary certificates `toyengine submit` makes by default need 'cryptography' too).
set -euo pipefail

OUT=./dask-tls
DAYS=365
HOSTS=()
die() { echo "make-certs.sh: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
    case $1 in
        -o|--out) [[ $# -ge 2 ]] || die "$1 needs a value"; OUT=$2; shift 2 ;;
        --host) [[ $# -ge 2 ]] || die "$1 needs a value"; HOSTS+=("$2"); shift 2 ;;
        --days) [[ $# -ge 2 ]] || die "$1 needs a value"; DAYS=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
[[ ${#HOSTS[@]} -gt 0 ]] || HOSTS=(localhost 127.0.0.1)

if ! command -v openssl >/dev/null; then
    echo "make-certs.sh: openssl not found; using Python 'cryptography' instead" >&2
    args=()
    for h in "${HOSTS[@]}"; do args+=(--host "$h"); done
    PY=${PYTHON:-python3}
    exec "$PY" -m toyengine.cli cluster make-certs "$OUT" --days "$DAYS" "${args[@]}"
fi

mkdir -p "$OUT"
chmod 700 "$OUT"
OUT=$(cd "$OUT" && pwd)
umask 077

SAN=""
for h in "${HOSTS[@]}"; do
    if [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then SAN+="${SAN:+,}IP:$h"; else SAN+="${SAN:+,}DNS:$h"; fi
done

TAG=$(openssl rand -hex 4)
# the CA: EC P-256 key, self-signed, may sign end-entity certificates only
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$OUT/ca-key.pem" -out "$OUT/ca.pem" -days "$DAYS" -sha256 \
    -subj "/CN=toyengine Dask CA $TAG" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

EXT="$OUT/.ext.cnf"
cat >"$EXT" <<EOF
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyAgreement
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = $SAN
authorityKeyIdentifier = keyid
EOF
for role in scheduler worker client; do
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
        -keyout "$OUT/$role-key.pem" -out "$OUT/$role.csr" \
        -subj "/CN=toyengine-$role" 2>/dev/null
    openssl x509 -req -in "$OUT/$role.csr" -CA "$OUT/ca.pem" -CAkey "$OUT/ca-key.pem" \
        -set_serial "0x$(openssl rand -hex 16)" -days "$DAYS" -sha256 \
        -extfile "$EXT" -out "$OUT/$role.pem" 2>/dev/null
    rm -f "$OUT/$role.csr"
    openssl verify -CAfile "$OUT/ca.pem" "$OUT/$role.pem" >/dev/null \
        || die "the $role certificate does not verify against the CA"
done
rm -f "$EXT"
chmod 600 "$OUT"/*-key.pem
chmod 644 "$OUT/ca.pem" "$OUT"/scheduler.pem "$OUT"/worker.pem "$OUT"/client.pem

cat >"$OUT/dask-security.yaml" <<EOF
# Dask security configuration (TLS with mutual authentication), written by
# cluster/tls/make-certs.sh. Use it with:  toyengine run|submit ... --tls-config THIS_FILE,
# cluster/start-cluster.sh --tls-config THIS_FILE, or  DASK_CONFIG=THIS_FILE.
# Only holders of a certificate signed by ca.pem can join or use the cluster.
distributed:
  comm:
    require-encryption: true
    default-scheme: tls
    tls:
      ca-file: $OUT/ca.pem
      scheduler:
        cert: $OUT/scheduler.pem
        key: $OUT/scheduler-key.pem
      worker:
        cert: $OUT/worker.pem
        key: $OUT/worker-key.pem
      client:
        cert: $OUT/client.pem
        key: $OUT/client-key.pem
EOF
chmod 644 "$OUT/dask-security.yaml"
echo "$OUT/dask-security.yaml"
