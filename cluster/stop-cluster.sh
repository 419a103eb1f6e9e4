#!/usr/bin/env bash
# stop-cluster.sh - stop the scheduler and workers that start-cluster.sh started.
#
# Usage:
#   cluster/stop-cluster.sh [-d DIR] [--timeout S]
#
#   -d, --dir DIR    the run directory given to start-cluster.sh (default ./dask-cluster)
#   --timeout S      seconds to wait after SIGTERM before SIGKILL (default 20)
#
# Only the processes listed in DIR/pids are signalled (workers first, then the
# scheduler), each as its own process group when start-cluster.sh made one. A pid that
# no longer runs `dask` is skipped, so a stale pids file cannot hit another process.
set -euo pipefail

DIR=./dask-cluster
TIMEOUT=20
die() { echo "stop-cluster.sh: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
    case $1 in
        -d|--dir) [[ $# -ge 2 ]] || die "-d needs a value"; DIR=$2; shift 2 ;;
        --timeout) [[ $# -ge 2 ]] || die "--timeout needs a value"; TIMEOUT=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1" ;;
    esac
done
PIDS="$DIR/pids"
[[ -f $PIDS ]] || { echo "stop-cluster.sh: nothing to stop ($PIDS not found)" >&2; exit 0; }

alive() { kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }
is_dask() { ps -o args= -p "$1" 2>/dev/null | grep -q dask; }

signal() {  # SIG PID KIND
    if [[ $3 == group ]]; then kill "-$1" -- "-$2" 2>/dev/null || true
    else kill "-$1" "$2" 2>/dev/null || true; fi
}

stop_all() {  # ROLE-FILTER: workers | scheduler
    local name pid kind targets=()
    while read -r name pid kind; do
        [[ -z ${pid:-} ]] && continue
        if [[ $1 == scheduler ]]; then [[ $name == scheduler ]] || continue
        else [[ $name == scheduler ]] && continue; fi
        alive "$pid" || continue
        is_dask "$pid" || { echo "stop-cluster.sh: pid $pid ($name) is not dask; skipped" >&2; continue; }
        signal TERM "$pid" "$kind"
        targets+=("$pid:$kind")
    done <"$PIDS"
    [[ ${#targets[@]} -eq 0 ]] && return 0
    local t entry left
    for ((t = 0; t < TIMEOUT * 10; t++)); do
        left=0
        for entry in "${targets[@]}"; do alive "${entry%%:*}" && left=1; done
        [[ $left == 0 ]] && return 0
        sleep 0.1
    done
    for entry in "${targets[@]}"; do
        if alive "${entry%%:*}"; then
            echo "stop-cluster.sh: pid ${entry%%:*} ignored SIGTERM; sending SIGKILL" >&2
            signal KILL "${entry%%:*}" "${entry##*:}"
        fi
    done
}

stop_all workers
stop_all scheduler
rm -f "$PIDS" "$DIR/address"
echo "stopped the cluster of $DIR" >&2
