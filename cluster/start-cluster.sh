#!/usr/bin/env bash
# start-cluster.sh - start a Dask scheduler and N workers for toyengine, as separate
# background processes (`dask scheduler` / `dask worker` under the hood).
#
# Usage:
#   cluster/start-cluster.sh [options]
#
#   -n, --workers N          worker processes to start on this machine (default 2;
#                            0 = scheduler only)
#   -d, --dir DIR            run directory: scheduler.json, address, pids, logs
#                            (default ./dask-cluster)
#   --host HOST              address the scheduler, its dashboard and the workers listen
#                            on (default 127.0.0.1: this machine, but every user of it;
#                            give the host name or IP that the other machines use, and
#                            see --tls)
#   --port PORT              scheduler port (default 8786; 0 = any free port)
#   --dashboard-address A    scheduler dashboard (default HOST:8787; "none" = off). The
#                            dashboard has no authentication, even with TLS: keep it on
#                            127.0.0.1 and reach it through an SSH tunnel
#   --scheduler ADDRESS      start no scheduler: join the workers to this one
#                            (e.g. tcp://node01:8786, started on another machine)
#   --scheduler-file FILE    ... or to the one described by FILE (shared filesystem)
#   --nthreads N             threads per worker (default 1: the fits hold the GIL)
#   --memory-limit M         per worker, e.g. 2GB (default auto)
#   --worker-host HOST       address the workers listen on (default: --host)
#   --lifetime D             retire each worker after D (e.g. 60m) ...
#   --lifetime-stagger D     ... +- D at random ...
#   --lifetime-restart       ... and start a fresh one in its place
#   --tls                    TLS with mutual authentication, certificates made once in
#                            DIR/tls by `toyengine cluster make-certs` (clients use
#                            --tls-config DIR/tls/dask-security.yaml); use it on a
#                            shared machine and whenever --host is not 127.0.0.1:
#                            without it anyone who reaches a port can run code as you
#   --tls-config FILE        ... or an existing Dask security YAML (toyengine cluster
#                            make-certs, cluster/tls/make-certs.sh)
#   --timeout S              seconds to wait for the scheduler and workers (default 60)
#   -h, --help
#
# Environment: DASK (default `dask`), PYTHON (default `python3`, used only to read the
# TLS file) and TOYENGINE (default `toyengine`, used only by --tls) select the
# executables; use those of the environment toyengine is in.
#
# Prints the scheduler address as the last line of stdout and writes it to DIR/address:
#   toyengine run STUDY --store S --scheduler "$(cat DIR/address)"
# Stop everything started here with:  cluster/stop-cluster.sh -d DIR
set -euo pipefail

WORKERS=2
DIR=./dask-cluster
HOST=127.0.0.1
PORT=8786
DASHBOARD=""
SCHED_ADDRESS=""
SCHED_FILE=""
NTHREADS=1
MEMORY=auto
WORKER_HOST=""
LIFETIME=""
STAGGER=""
RESTART=0
TLS_CONFIG=""
TLS_MAKE=0
TIMEOUT=60
DASK=${DASK:-dask}
PYTHON=${PYTHON:-python3}
TOYENGINE=${TOYENGINE:-toyengine}

die() { echo "start-cluster.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
need() { [[ $# -ge 2 && -n $2 ]] || die "option $1 needs a value"; }

while [[ $# -gt 0 ]]; do
    case $1 in
        -n|--workers) need "$@"; WORKERS=$2; shift 2 ;;
        -d|--dir) need "$@"; DIR=$2; shift 2 ;;
        --host) need "$@"; HOST=$2; shift 2 ;;
        --port) need "$@"; PORT=$2; shift 2 ;;
        --dashboard-address) need "$@"; DASHBOARD=$2; shift 2 ;;
        --scheduler) need "$@"; SCHED_ADDRESS=$2; shift 2 ;;
        --scheduler-file) need "$@"; SCHED_FILE=$2; shift 2 ;;
        --nthreads) need "$@"; NTHREADS=$2; shift 2 ;;
        --memory-limit) need "$@"; MEMORY=$2; shift 2 ;;
        --worker-host) need "$@"; WORKER_HOST=$2; shift 2 ;;
        --lifetime) need "$@"; LIFETIME=$2; shift 2 ;;
        --lifetime-stagger) need "$@"; STAGGER=$2; shift 2 ;;
        --lifetime-restart) RESTART=1; shift ;;
        --tls-config) need "$@"; TLS_CONFIG=$2; shift 2 ;;
        --tls) TLS_MAKE=1; shift ;;
        --timeout) need "$@"; TIMEOUT=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done

[[ $WORKERS =~ ^[0-9]+$ ]] || die "--workers must be a number, got '$WORKERS'"
[[ $TLS_MAKE == 1 && -n $TLS_CONFIG ]] && die "--tls and --tls-config: give one of them"
WORKER_HOST=${WORKER_HOST:-$HOST}
hostport() { if [[ $1 == *:* && $1 != \[* ]]; then echo "[$1]:$2"; else echo "$1:$2"; fi; }
is_loopback() { [[ $1 == 127.* || $1 == localhost || $1 == ::1 || $1 == "[::1]" ]]; }

command -v "$DASK" >/dev/null || die "'$DASK' not found: activate the environment where \
toyengine is installed (pip install toyengine) or set DASK=/path/to/dask"

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
PIDS="$DIR/pids"
if [[ -s $PIDS ]]; then
    die "$PIDS exists: a cluster may already run from $DIR; stop it first with \
cluster/stop-cluster.sh -d $DIR"
fi
if [[ $TLS_MAKE == 1 ]]; then  # certificates of this run directory, made once
    TLS_CONFIG="$DIR/tls/dask-security.yaml"
    if [[ ! -f $TLS_CONFIG ]]; then
        command -v "$TOYENGINE" >/dev/null || die "'$TOYENGINE' not found (needed by --tls): \
set TOYENGINE=/path/to/toyengine or make certificates with cluster/tls/make-certs.sh"
        hosts=(--host "$HOST" --host localhost --host 127.0.0.1)
        "$TOYENGINE" cluster make-certs "$DIR/tls" "${hosts[@]}" >/dev/null \
            || die "toyengine cluster make-certs $DIR/tls failed"
    fi
    echo "TLS: clients connect with --tls-config $TLS_CONFIG" >&2
fi

# TLS: role certificate paths from the Dask security YAML (relative paths are relative
# to the file, as in toyengine.cluster.load_security).
tls_args() {  # ROLE -> prints --tls-ca-file X --tls-cert Y --tls-key Z, one per line
    "$PYTHON" - "$TLS_CONFIG" "$1" <<'EOF'
import os, sys, yaml
path, role = sys.argv[1], sys.argv[2]
with open(path) as f:
    cfg = yaml.safe_load(f) or {}
tls = ((cfg.get("distributed") or {}).get("comm") or {}).get("tls") or {}
base = os.path.dirname(os.path.abspath(path))
def full(p):
    p = os.path.expanduser(str(p))
    return p if os.path.isabs(p) else os.path.join(base, p)
entry = tls.get(role) or {}
if not (tls.get("ca-file") and entry.get("cert") and entry.get("key")):
    sys.exit(f"{path}: distributed.comm.tls needs ca-file and {role}.cert/key")
for flag, value in (("--tls-ca-file", tls["ca-file"]), ("--tls-cert", entry["cert"]),
                    ("--tls-key", entry["key"])):
    print(flag)
    print(full(value))
EOF
}

# Start "$@" in the background as its own process group (setsid) so that
# stop-cluster.sh (or a test) can signal the whole worker: nanny and worker process.
launch() {  # NAME LOG CMD...
    local name=$1 log=$2
    shift 2
    if command -v setsid >/dev/null; then
        setsid "$@" </dev/null >"$log" 2>&1 &
        echo "$name $! group" >>"$PIDS"
    else
        "$@" </dev/null >"$log" 2>&1 &
        echo "$name $! single" >>"$PIDS"
    fi
    echo $!
}

alive() { kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }

fail_with_log() {  # MESSAGE LOG
    echo "start-cluster.sh: $1; last lines of $2:" >&2
    tail -n 20 "$2" >&2 || true
    echo "start-cluster.sh: stopping what was started (cluster/stop-cluster.sh -d $DIR)" >&2
    "$(dirname "$0")/stop-cluster.sh" -d "$DIR" >&2 || true
    exit 1
}

TLS_SCHED=()
TLS_WORKER=()
if [[ -n $TLS_CONFIG ]]; then
    [[ -f $TLS_CONFIG ]] || die "--tls-config $TLS_CONFIG: no such file"
    mapfile -t TLS_SCHED < <(tls_args scheduler) || die "cannot read $TLS_CONFIG"
    mapfile -t TLS_WORKER < <(tls_args worker) || die "cannot read $TLS_CONFIG"
    [[ ${#TLS_SCHED[@]} -eq 6 && ${#TLS_WORKER[@]} -eq 6 ]] || die "cannot read $TLS_CONFIG"
fi

if [[ -n $SCHED_ADDRESS ]]; then
    ADDRESS=$SCHED_ADDRESS
elif [[ -n $SCHED_FILE ]]; then
    [[ -f $SCHED_FILE ]] || die "--scheduler-file $SCHED_FILE: no such file"
    ADDRESS=$(sed -n 's/.*"address": *"\([^"]*\)".*/\1/p' "$SCHED_FILE" | head -n 1)
    [[ -n $ADDRESS ]] || die "no address in $SCHED_FILE"
else
    SCHED_FILE="$DIR/scheduler.json"
    rm -f "$SCHED_FILE" "$DIR/address"
    args=(scheduler --host "$HOST" --port "$PORT" --scheduler-file "$SCHED_FILE")
    if [[ $DASHBOARD == none ]]; then  # Dask still serves /health and /metrics over HTTP:
        args+=(--no-dashboard --dashboard-address "$(hostport "$HOST" 0)")  # on HOST too
    else
        args+=(--dashboard-address "${DASHBOARD:-$(hostport "$HOST" 8787)}")
    fi
    if [[ -n $TLS_CONFIG ]]; then
        args+=(--protocol tls "${TLS_SCHED[@]}")
    fi
    pid=$(launch scheduler "$DIR/scheduler.log" "$DASK" "${args[@]}")
    ADDRESS=""
    for ((i = 0; i < TIMEOUT * 10; i++)); do
        if [[ -s $SCHED_FILE ]]; then
            ADDRESS=$(sed -n 's/.*"address": *"\([^"]*\)".*/\1/p' "$SCHED_FILE" | head -n 1)
            [[ -n $ADDRESS ]] && break
        fi
        alive "$pid" || fail_with_log "the scheduler exited" "$DIR/scheduler.log"
        sleep 0.1
    done
    [[ -n $ADDRESS ]] || fail_with_log "no scheduler after ${TIMEOUT} s" "$DIR/scheduler.log"
    echo "scheduler: $ADDRESS (pid $pid, log $DIR/scheduler.log)" >&2
fi

if [[ -n $SCHED_ADDRESS || -n $SCHED_FILE ]] && is_loopback "$WORKER_HOST"; then
    SHOST=${ADDRESS#*://}
    SHOST=${SHOST%:*}
    is_loopback "$SHOST" || die "workers joining $ADDRESS would listen on $WORKER_HOST, \
which that scheduler cannot reach: give --host with this machine's name or IP (and --tls-config)"
fi

WPIDS=()
WLOGS=()
for ((i = 1; i <= WORKERS; i++)); do
    name="$(hostname -s 2>/dev/null || hostname)-w$i"
    args=(worker "$ADDRESS" --name "$name" --nthreads "$NTHREADS" --nworkers 1
          --memory-limit "$MEMORY" --local-directory "$DIR/$name" --no-dashboard
          --dashboard-address "$(hostport "$WORKER_HOST" 0)" --death-timeout 60)
    args+=(--host "$WORKER_HOST")
    # toyengine's start-up on the worker and its nanny: kernels loaded before the worker
    # joins, glibc's adaptive malloc thresholds kept (toyengine/run/preload.py)
    args+=(--preload toyengine.run.preload --preload-nanny toyengine.run.preload)
    [[ -n $LIFETIME ]] && args+=(--lifetime "$LIFETIME")
    [[ -n $STAGGER ]] && args+=(--lifetime-stagger "$STAGGER")
    [[ $RESTART == 1 ]] && args+=(--lifetime-restart)
    [[ -n $TLS_CONFIG ]] && args+=("${TLS_WORKER[@]}")
    mkdir -p "$DIR/$name"
    WPIDS+=("$(launch "$name" "$DIR/$name.log" "$DASK" "${args[@]}")")
    WLOGS+=("$DIR/$name.log")
done

# wait until every worker has registered with the scheduler
for ((k = 0; k < ${#WPIDS[@]}; k++)); do
    ok=0
    for ((i = 0; i < TIMEOUT * 10; i++)); do
        if grep -q "Registered to:" "${WLOGS[k]}" 2>/dev/null; then ok=1; break; fi
        alive "${WPIDS[k]}" || fail_with_log "worker $((k + 1)) exited" "${WLOGS[k]}"
        sleep 0.1
    done
    [[ $ok == 1 ]] || fail_with_log "worker $((k + 1)) did not register within ${TIMEOUT} s" \
        "${WLOGS[k]}"
done
[[ $WORKERS -gt 0 ]] && echo "workers: $WORKERS registered (logs $DIR/*-w*.log)" >&2

echo "$ADDRESS" >"$DIR/address"
echo "stop with: $(dirname "$0")/stop-cluster.sh -d $DIR" >&2
echo "$ADDRESS"
