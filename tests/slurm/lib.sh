# tests/slurm/lib.sh: what run.sh (a one-node cluster) and cluster.sh (a
# cluster of network-namespace hosts) share; sourced, never run. It owns the
# preconditions (root, packages), the environment scrub, munge, the
# slurm.conf settings every test cluster has, the pmix check, process
# helpers, the log dump and the daemons' teardown.
#
# The sourcing script sets WORK (its temporary directory) before calling
# start_munge, slurm_conf_common or teardown_slurm, and may set
# SLURM_TEST_PREFIX (the word its messages start with, "slurm-test").

WORK=${WORK:-}        # temporary directory holding everything of this run
MUNGED_PID=""         # pid of the munged we started (empty: none started)
AUTH_INFO=""          # AuthInfo line for a private munge socket
DAEMONS_STARTED=0     # slurmctld/slurmd were started: teardown stops them

say()  { echo "${SLURM_TEST_PREFIX:-slurm-test}: $*"; }
fail() { echo "${SLURM_TEST_PREFIX:-slurm-test}: FAILED: $*" >&2; dump_logs; exit 1; }
skip() { echo "${SLURM_TEST_PREFIX:-slurm-test}: SKIPPED: $*"; exit 77; }

# --- preconditions ---------------------------------------------------------

# $1: the script to run again under sudo; the rest: its arguments.
ensure_root() {
    local script=$1
    shift
    [[ $(id -u) -eq 0 ]] && return 0
    # Passwordless sudo (as on CI runners) is as good as root.
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        say "not root; re-running under sudo"
        exec sudo -n -E bash "$(readlink -f "$script")" "$@"
    fi
    skip "needs root (or passwordless sudo) to run slurmd and munged"
}

# $@: extra programs needed beside Slurm's and munge's.
check_tools() {
    local missing=() t
    for t in munged munge unmunge slurmctld slurmd srun sinfo scontrol timeout "$@"; do
        command -v "$t" >/dev/null || missing+=("$t")
    done
    if ((${#missing[@]})); then
        skip "missing ${missing[*]}; install the packages slurm-wlm and munge" \
             "(tools/setup.sh does)"
    fi
}

resolve_binary() {
    local b=$1
    if [[ $b != */* ]]; then
        b=$(command -v "$b") || fail "binary '$1' not found"
    fi
    [[ -x $b && -f $b ]] || fail "binary '$1' is not an executable file"
    readlink -f "$b"
}

# Drop any Slurm/PMI state inherited from an enclosing job (e.g. ctest run
# inside a real Slurm allocation): srun would otherwise join that job.
scrub_environment() {
    local v
    export PATH=$PATH:/usr/sbin:/sbin  # slurmd, slurmctld, munged live there
    for v in $(compgen -e); do
        case $v in
            PMIX_MCA_*) ;;  # user tuning (e.g. PMIX_MCA_gds=hash) stays
            SLURM_TEST_*) ;;  # this script's own knobs
            SLURM_*|SRUN_*|SALLOC_*|SBATCH_*|PMIX_*|PMI_*) unset "$v" ;;
        esac
    done
    if [[ $(id -u) -eq 0 ]]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
}

# --- processes -------------------------------------------------------------

# A zombie (exited, not yet reaped by its parent) counts as gone.
pid_alive() {
    [[ -n $1 ]] && kill -0 "$1" 2>/dev/null || return 1
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

# Wait up to $2 seconds for pid $1 to exit.
wait_gone() {
    local pid=$1 i
    for ((i = 0; i < $2 * 10; i++)); do
        pid_alive "$pid" || return 0
        sleep 0.1
    done
    return 1
}

# Stop pid $1 (named $2): TERM, wait, then KILL.
stop_pid() { stop_pids "$1=$2"; }

# Stop every PID=NAME given at once: TERM, wait up to 10 s, then KILL.
stop_pids() {
    local entry pid
    for entry in "$@"; do
        pid=${entry%%=*}
        pid_alive "$pid" && kill -TERM "$pid" 2>/dev/null
    done
    for entry in "$@"; do
        pid=${entry%%=*}
        pid_alive "$pid" || continue
        if ! wait_gone "$pid" 10; then
            say "${entry#*=} ($pid) did not stop; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            wait_gone "$pid" 5 || say "${entry#*=} ($pid) is still alive"
        fi
    done
}

pid_from_file() {
    if [[ -s $1 ]]; then tr -dc '0-9' <"$1"; fi
}

# Processes whose environment holds our SLURM_CONF: our slurmctld, slurmd,
# slurmstepd and job tasks, and nothing else on the machine.
our_processes() {
    local f pid
    [[ -n ${SLURM_CONF:-} ]] || return 0
    for f in /proc/[0-9]*/environ; do
        pid=${f#/proc/}; pid=${pid%/environ}
        [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
        if { tr '\0' '\n' <"$f"; } 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF"; then
            echo "$pid"
        fi
    done
}

# $1: the pid; prints its command line.
command_of() { { tr '\0' ' ' </proc/"$1"/cmdline; } 2>/dev/null; }

dump_file() {
    [[ -s $1 ]] || return 0
    echo "----- $1 (last 60 lines) -----" >&2
    tail -n 60 "$1" >&2
}

dump_logs() {
    [[ -n $WORK && -d $WORK ]] || return 0
    local f
    for f in "$WORK"/munge/munged.log "$WORK"/log/*.log; do
        [[ -e $f ]] && dump_file "$f"
    done
    if ((DAEMONS_STARTED)); then
        echo "----- sinfo -----" >&2
        timeout 10 ${SLURM_TEST_HEAD:-} sinfo -N -l 2>&1 >&2 || true
    fi
}

# --- munge -----------------------------------------------------------------

munge_works() {
    # $@: extra munge/unmunge options (e.g. -S socket)
    timeout 10 munge -n "$@" 2>/dev/null | timeout 10 unmunge "$@" >/dev/null 2>&1
}

# Uses the munged of the default socket when one answers, else starts a
# private one in $WORK/munge (its socket a file on the shared filesystem, so
# every namespace host reaches it) and sets AUTH_INFO for slurm.conf.
start_munge() {
    if munge_works; then
        say "using the munged already running on the default socket"
        return 0
    fi
    local user=munge dir=$WORK/munge i
    getent passwd munge >/dev/null || user=root
    mkdir -p "$dir"
    # munged runs as $user and must reach its files: give it the directory.
    chmod 0711 "$WORK"
    chown "$user:" "$dir"
    chmod 0755 "$dir"  # munged: socket dir must be searchable by all
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile="$dir/munge.key" >/dev/null 2>&1 ||
            dd if=/dev/urandom of="$dir/munge.key" bs=1 count=1024 status=none
    else
        dd if=/dev/urandom of="$dir/munge.key" bs=1 count=1024 status=none
    fi
    chown "$user:" "$dir/munge.key"
    chmod 0400 "$dir/munge.key"
    say "starting a private munged (user $user, socket $dir/munge.socket)"
    runuser -u "$user" -- munged \
        --socket="$dir/munge.socket" \
        --key-file="$dir/munge.key" \
        --pid-file="$dir/munged.pid" \
        --log-file="$dir/munged.log" \
        --seed-file="$dir/munged.seed" ||
        fail "munged did not start"
    for ((i = 0; i < 50; i++)); do
        MUNGED_PID=$(pid_from_file "$dir/munged.pid")
        [[ -n $MUNGED_PID ]] && munge_works -S "$dir/munge.socket" && break
        sleep 0.2
    done
    munge_works -S "$dir/munge.socket" || fail "munge -n | unmunge fails on $dir/munge.socket"
    AUTH_INFO="AuthInfo=socket=$dir/munge.socket"
}

# --- slurm -----------------------------------------------------------------

# The slurm.conf lines every test cluster has (state, spool and logs in
# $WORK; root daemons; no accounting; CPUs as configured); the caller adds
# SlurmctldHost, the ports, the pid files and the nodes.
slurm_conf_common() {
    mkdir -p "$WORK/state" "$WORK/spool" "$WORK/log"
    cat <<EOF
ClusterName=fsdpgen-test
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
$AUTH_INFO
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool/%n
SlurmctldLogFile=$WORK/log/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
InactiveLimit=0
KillWait=5
EOF
}

# Memory (MiB) to configure per node: half of this machine's, split over $1 nodes.
node_memory() {
    local mem
    mem=$(awk -v n="${1:-1}" '/^MemTotal:/ { printf "%d", $2 / 1024 / 2 / n }' /proc/meminfo)
    ((mem >= 1)) || mem=1
    echo "$mem"
}

check_pmix() {
    # srun --mpi=list prints to stderr on some versions.
    if ! timeout 30 ${SLURM_TEST_HEAD:-} srun --mpi=list 2>&1 | grep -qw pmix; then
        skip "this Slurm has no pmix MPI plugin (srun --mpi=list)"
    fi
}

# Cancels the jobs, stops the daemons whose pid files are given and then
# every process still carrying this run's SLURM_CONF (slurmstepd, tasks),
# and our munged.
teardown_slurm() {
    local f pid pids daemons=()
    if ((DAEMONS_STARTED)); then
        timeout 10 ${SLURM_TEST_HEAD:-} scancel --full --quiet --user=root >/dev/null 2>&1
        for f in "$@"; do
            [[ -e $f ]] && daemons+=("$(pid_from_file "$f")=$(basename "$f" .pid)")
        done
        ((${#daemons[@]} == 0)) || stop_pids "${daemons[@]}"
        pids=$(our_processes)
        for pid in $pids; do
            say "killing leftover process $pid ($(command_of "$pid"))"
            kill -KILL "$pid" 2>/dev/null
        done
    fi
    if [[ -n $MUNGED_PID ]]; then
        stop_pid "$MUNGED_PID" munged
    fi
    if ((DAEMONS_STARTED)) || [[ -n $MUNGED_PID ]]; then
        say "stopped the daemons this run started"
    fi
}

# Removes $WORK unless SLURM_TEST_KEEP=1.
remove_work() {
    if [[ -n $WORK && -d $WORK ]]; then
        if [[ ${SLURM_TEST_KEEP:-0} == 1 ]]; then
            say "kept $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
}
