#!/usr/bin/env bash
# slurm-local.sh - a single-node SLURM on this machine (127.0.0.1), to rehearse a
# `toyengine submit --cluster slurm` campaign before sending it to a real site.
#
# Usage:
#   cluster/slurm-local.sh start [options]   start munged, slurmctld and slurmd
#   cluster/slurm-local.sh stop  [-d DIR]    cancel the jobs, stop the daemons (by pid)
#   cluster/slurm-local.sh status [-d DIR]   the node and the queue
#
#   -d, --dir DIR     run directory: slurm.conf, munge key and socket, state, spool, logs,
#                     pids (default ${TMPDIR:-/tmp}/toyengine-slurm-$USER)
#   --cpus N          CPUs of the node (default: all of this machine's, `nproc`)
#   --memory MB       memory of the node in MB (default: this machine's MemTotal)
#   --timeout S       seconds to wait for the node to become idle (default 60)
#   -h, --help
#
# Needs SLURM's and MUNGE's daemons and commands, e.g. Debian/Ubuntu:
#   apt-get install --no-install-recommends slurm-wlm munge
# Nothing outside DIR is touched: its own munge key and socket (not the system's), its own
# free ports, state and logs in DIR. The daemons run as the user who starts them
# (SlurmUser = SlurmdUser = you); tested as root.
#
# `start` prints, as the last line of stdout, the line that points the SLURM commands
# (sbatch, squeue, scancel, sinfo) and `toyengine submit` at this SLURM:
#   export SLURM_CONF=DIR/slurm.conf
# Finished jobs are logged one line each in DIR/jobcomp.log (JobState=COMPLETED,
# CANCELLED, TIMEOUT ...); job output goes where sbatch puts it (slurm-JOBID.out).
set -euo pipefail

DIR=${TMPDIR:-/tmp}/toyengine-slurm-${USER:-$(id -un)}
CPUS=""
MEMORY=""
TIMEOUT=60
NODE=toyengine-node
CLUSTER=toyengine-local

die() { echo "slurm-local.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
need() { [[ $# -ge 2 && -n $2 ]] || die "option $1 needs a value"; }

[[ $# -ge 1 ]] || { usage; exit 2; }
ACTION=$1
shift
case $ACTION in
    start|stop|status) ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown action '$ACTION' (start, stop or status; --help)" ;;
esac
while [[ $# -gt 0 ]]; do
    case $1 in
        -d|--dir) need "$@"; DIR=$2; shift 2 ;;
        --cpus) need "$@"; CPUS=$2; shift 2 ;;
        --memory) need "$@"; MEMORY=$2; shift 2 ;;
        --timeout) need "$@"; TIMEOUT=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown option '$1' (see --help)" ;;
    esac
done
DIR=$(mkdir -p "$DIR" && cd "$DIR" && pwd)
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF

alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }
pid_of() { [[ -s $DIR/$1.pid ]] && cat "$DIR/$1.pid" || true; }

# stop one daemon by its pid file: TERM, then KILL after 10 s
stop_daemon() {
    local name=$1 pid i
    pid=$(pid_of "$name")
    if alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$DIR/$name.pid"
}

# processes of the jobs of this SLURM: their environment names our slurm.conf
job_pids() {
    local e pid env
    for e in /proc/[0-9]*/environ; do
        pid=${e#/proc/}; pid=${pid%/environ}
        [[ $pid == "$$" ]] && continue
        env=$( { tr '\0' '\n' < "$e"; } 2>/dev/null ) || continue
        grep -qxF "SLURM_CONF=$CONF" <<< "$env" || continue
        # only job steps (they have SLURM_JOB_ID), not a shell that merely exported it
        grep -q '^SLURM_JOB_ID=' <<< "$env" && echo "$pid"
    done
    return 0
}

do_stop() {
    local i left
    if alive "$(pid_of slurmctld)"; then
        # cancel every job so that slurmd's step daemons end them (SIGTERM, KillWait, KILL)
        scancel --full --quiet --user "$(id -un)" 2>/dev/null || true
        for ((i = 0; i < 150; i++)); do
            [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
            sleep 0.2
        done
    fi
    stop_daemon slurmd
    stop_daemon slurmctld
    # step daemons and job processes that outlived slurmd (they are not its children)
    left=$(job_pids)
    if [[ -n $left ]]; then
        # shellcheck disable=SC2086
        kill -KILL $left 2>/dev/null || true
    fi
    for p in $(pgrep -f "^slurmstepd: \[" || true); do
        # a step daemon of ours has our spool directory open as its cwd
        [[ $(readlink "/proc/$p/cwd" 2>/dev/null) == "$DIR/spool"* ]] && kill -KILL "$p" 2>/dev/null
    done
    stop_daemon munged
    echo "slurm-local.sh: stopped the SLURM in $DIR" >&2
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

do_start() {
    local bin
    for bin in munged slurmctld slurmd sinfo sbatch; do
        command -v "$bin" >/dev/null || [[ -x /usr/sbin/$bin ]] ||
            die "$bin not found: install SLURM and MUNGE (Debian/Ubuntu: apt-get install --no-install-recommends slurm-wlm munge)"
    done
    export PATH=$PATH:/usr/sbin
    if alive "$(pid_of slurmctld)"; then
        die "a SLURM is already running in $DIR (cluster/slurm-local.sh stop -d $DIR)"
    fi
    do_stop 2>/dev/null   # leftovers of an earlier run in DIR
    CPUS=${CPUS:-$(nproc)}
    MEMORY=${MEMORY:-$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)}
    local user ctld_port slurmd_port
    user=$(id -un)
    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    rm -rf "$DIR/state" "$DIR/spool" "$DIR/munge"
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/munge"
    chmod 700 "$DIR/munge"

    # MUNGE: a key for this SLURM only, its own socket
    head -c 1024 /dev/urandom > "$DIR/munge/munge.key"
    chmod 400 "$DIR/munge/munge.key"
    munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/munged.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munged.seed" ||
        die "munged did not start; see $DIR/log/munged.log"

    cat > "$CONF" <<EOF
# single-node SLURM written by cluster/slurm-local.sh (delete with: slurm-local.sh stop)
ClusterName=$CLUSTER
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
# a cancelled or timed-out job gets SIGTERM, then SIGKILL this many seconds later
KillWait=5
MinJobAge=60
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEMORY State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

    slurmctld -f "$CONF" -i ||
        { do_stop 2>/dev/null; die "slurmctld did not start; see $DIR/log/slurmctld.log"; }
    slurmd -f "$CONF" -N "$NODE" ||
        { do_stop 2>/dev/null; die "slurmd did not start; see $DIR/log/slurmd.log"; }

    local t0 state=""
    t0=$(date +%s)
    while :; do
        state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
        [[ $state == idle ]] && break
        for d in munged slurmctld slurmd; do
            alive "$(pid_of $d)" && continue
            do_stop 2>/dev/null
            die "$d ended while starting; see $DIR/log/$d.log"
        done
        if (( $(date +%s) - t0 >= TIMEOUT )); then
            do_stop 2>/dev/null
            die "node $NODE not idle after $TIMEOUT s (state '${state:-none}'); see $DIR/log/"
        fi
        sleep 0.5
    done
    echo "slurm-local.sh: SLURM on 127.0.0.1: node $NODE ($CPUS CPUs, $MEMORY MB), partition 'local', in $DIR" >&2
    echo "slurm-local.sh: stop it with: $0 stop -d $DIR" >&2
    echo "export SLURM_CONF=$CONF"
}

do_status() {
    [[ -f $CONF ]] || die "no SLURM in $DIR"
    sinfo
    squeue
}

case $ACTION in
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
esac
