#!/usr/bin/env bash
# tests/slurm/run.sh: run an MPI binary on a throwaway one-node Slurm cluster.
#
#   bash tests/slurm/run.sh [--expect-training | --expect-stall RANK] BINARY [ARGS...]
#
# Starts, on this machine and entirely inside a fresh temporary directory:
#   - munged (only if no working munged answers on the default socket; ours
#     gets its own key, socket, pid and log files in the temporary directory),
#   - slurmctld and slurmd, with a generated slurm.conf (SLURM_CONF points
#     every Slurm command at it; ports are picked free at random),
# waits until the node is idle, runs
#   srun -n 2 --mpi=pmix BINARY ARGS...
# and always tears down what it started (trap on EXIT), leaving no daemons.
# With --expect-training (BINARY is a generated training binary) it then
# checks srun's output: the header says NTASKS ranks launched by srun, every
# step ran, and the loss is finite and falls from the first step to the last.
# With --expect-stall RANK (ARGS inject a stall into that rank, e.g.
# --stall-timeout 2 --inject-stall RANK:2:100) srun must end with the
# watchdog's exit code 3 well before the stall would have, and the output
# must hold one stall report naming RANK.
#
# Exit status: 0 when srun succeeded (and the output passed the checks); 1 on
# any failure of the cluster, of the binary or of the checks (srun output and
# the daemon logs are printed); 77 (CTest skip)
# when Slurm cannot run here for an environmental reason, printed as
# "SKIPPED: <reason>".  No system file is changed (nothing under /etc or /run).
#
# Environment knobs: SLURM_TEST_NTASKS (2), SLURM_TEST_START_TIMEOUT (seconds
# to wait for the node to be idle, 30), SLURM_TEST_RUN_TIMEOUT (seconds for
# srun, 300), SLURM_TEST_KEEP=1 keeps the temporary directory.
set -euo pipefail

NTASKS=${SLURM_TEST_NTASKS:-2}
START_TIMEOUT=${SLURM_TEST_START_TIMEOUT:-30}
RUN_TIMEOUT=${SLURM_TEST_RUN_TIMEOUT:-300}

WORK=""          # temporary directory holding everything of this run
MUNGED_PID=""    # pid of the munged we started (empty: none started)
AUTH_INFO=""     # AuthInfo line for a private munge socket
DAEMONS_STARTED=0
SRUN_PID=""      # pid of the timeout wrapping srun while it runs
EXPECT_STALL=""  # --expect-stall RANK: the rank the watchdog must name

say()  { echo "slurm-test: $*"; }
fail() { echo "slurm-test: FAILED: $*" >&2; dump_logs; exit 1; }
skip() { echo "slurm-test: SKIPPED: $*"; exit 77; }

usage() {
    echo "usage: bash tests/slurm/run.sh [--expect-training | --expect-stall RANK] BINARY [ARGS...]" >&2
    exit 2
}

# --- preconditions ---------------------------------------------------------

ensure_root() {
    [[ $(id -u) -eq 0 ]] && return 0
    # Passwordless sudo (as on CI runners) is as good as root.
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        say "not root; re-running under sudo"
        exec sudo -n -E bash "$(readlink -f "$0")" "$@"
    fi
    skip "needs root (or passwordless sudo) to run slurmd and munged"
}

check_tools() {
    local missing=() t
    for t in munged munge unmunge slurmctld slurmd srun sinfo scontrol timeout; do
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
            SLURM_*|SRUN_*|SALLOC_*|SBATCH_*|PMIX_*|PMI_*) unset "$v" ;;
        esac
    done
}

# --- helpers ---------------------------------------------------------------

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pick_ports() {
    local base _
    for _ in $(seq 1 50); do
        base=$((20000 + RANDOM % 30000))
        if ! port_in_use "$base" && ! port_in_use $((base + 1)); then
            CTLD_PORT=$base
            SLURMD_PORT=$((base + 1))
            return 0
        fi
    done
    fail "no free pair of TCP ports found"
}

pid_alive() { [[ -n $1 ]] && kill -0 "$1" 2>/dev/null; }

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
stop_pid() {
    local pid=$1 name=$2
    pid_alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" 10; then
        say "$name ($pid) did not stop; killing it"
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$pid" 5 || say "$name ($pid) is still alive"
    fi
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
        timeout 10 sinfo -N -l 2>&1 >&2 || true
    fi
}

# --- munge -----------------------------------------------------------------

munge_works() {
    # $@: extra munge/unmunge options (e.g. -S socket)
    timeout 10 munge -n "$@" 2>/dev/null | timeout 10 unmunge "$@" >/dev/null 2>&1
}

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

write_slurm_conf() {
    local host cpus mem
    host=$(hostname -s)
    cpus=$(nproc)
    # A node with fewer CPUs than tasks still runs the test: the configured
    # count wins over the detected one (SlurmdParameters=config_overrides).
    ((cpus >= NTASKS)) || cpus=$NTASKS
    mem=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 / 2 }' /proc/meminfo)
    ((mem >= 1)) || mem=1
    mkdir -p "$WORK/state" "$WORK/spool"
    cat >"$WORK/slurm.conf" <<EOF
# Generated by tests/slurm/run.sh; lives only for one test run.
ClusterName=fsdpgen-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
$AUTH_INFO
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool/%n
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/log/slurmctld.log
SlurmdLogFile=$WORK/log/slurmd.log
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
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$WORK/slurm.conf
}

start_slurm() {
    say "starting slurmctld (port $CTLD_PORT) and slurmd (port $SLURMD_PORT)"
    DAEMONS_STARTED=1
    slurmctld -c -f "$SLURM_CONF" || fail "slurmctld did not start"
    slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
}

wait_node_idle() {
    local i state=""
    for ((i = 0; i < START_TIMEOUT * 2; i++)); do
        state=$(timeout 10 sinfo -h -N -o '%T' 2>/dev/null | head -n 1 || true)
        case $state in
            idle) say "node is idle after ~$((i / 2)) s"; return 0 ;;
        esac
        sleep 0.5
    done
    fail "node not idle after ${START_TIMEOUT} s (last state: '${state:-none}')"
}

check_pmix() {
    # srun --mpi=list prints to stderr on some versions.
    if ! timeout 30 srun --mpi=list 2>&1 | grep -qw pmix; then
        skip "this Slurm has no pmix MPI plugin (srun --mpi=list)"
    fi
}

run_srun() {
    local rc out=$WORK/srun.out
    say "running: srun -n $NTASKS --mpi=pmix $*"
    # In the background, so that a TERM/INT sent to this script runs the
    # teardown at once instead of after srun returns.
    timeout -k 10 "$RUN_TIMEOUT" srun -n "$NTASKS" --mpi=pmix --kill-on-bad-exit=1 \
        "$@" > >(tee "$out") 2>&1 &
    SRUN_PID=$!
    set +e
    wait "$SRUN_PID"
    rc=$?
    set -e
    SRUN_PID=""
    if ((rc == 124 || rc == 137)); then
        fail "srun timed out after ${RUN_TIMEOUT} s"
    elif [[ -n $EXPECT_STALL ]]; then
        ((rc == 3)) || fail "srun exited with status $rc, not the watchdog's 3 (stalled)"
        say "srun exited with status 3 (stalled), as expected"
        return
    elif ((rc != 0)); then
        fail "srun exited with status $rc"
    fi
    say "srun succeeded"
}

# The output of a generated training binary (runtime/train.cpp): its header
# says "NTASKS ranks (...), launched by srun", the last step "step N/N |" ran
# and the summary "done: N steps in ... | loss FIRST -> LAST |" has finite
# losses with LAST below FIRST.
check_training() {
    local out=$WORK/srun.out summary total steps first last
    grep -qE "^  $NTASKS ranks \(.*\), launched by srun, " "$out" ||
        fail "the header does not say $NTASKS ranks launched by srun"
    total=$(sed -nE 's#^step +[0-9]+/([0-9]+) \|.*#\1#p' "$out" | tail -n 1)
    [[ -n $total ]] || fail "no step line in the output"
    grep -qE "^step $total/$total \| loss " "$out" || fail "the last step ($total) did not run"
    summary=$(grep -E '^done: ' "$out" | tail -n 1 || true)
    local re='^done: ([0-9]+) steps? in .* \| loss ([^ ]+) -> ([^ ]+) \|'
    [[ $summary =~ $re ]] || fail "no summary line ('done: N steps ... | loss A -> B |')"
    steps=${BASH_REMATCH[1]} first=${BASH_REMATCH[2]} last=${BASH_REMATCH[3]}
    ((steps == total)) || fail "$steps steps ran of $total"
    [[ $first =~ ^[0-9]+\.[0-9]+$ && $last =~ ^[0-9]+\.[0-9]+$ ]] ||
        fail "losses not finite: $first -> $last"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
        fail "the loss did not fall: $first -> $last"
    say "training output checked: $NTASKS ranks launched by srun, $steps of $total steps," \
        "loss $first -> $last"
}

# The watchdog's report (runtime/watchdog.h): one "stall at step N: rank R
# has been in op ..." line naming the stalled rank, and every rank stopping.
check_stall() {
    local out=$WORK/srun.out reports
    grep -qE "^  $NTASKS ranks \(.*\), launched by srun, " "$out" ||
        fail "the header does not say $NTASKS ranks launched by srun"
    reports=$(grep -cE '^stall at step [0-9]+: ' "$out" || true)
    ((reports == 1)) || fail "$reports stall reports, not one"
    grep -qE "^stall at step [0-9]+: rank $EXPECT_STALL has been in op " "$out" ||
        fail "the report does not name rank $EXPECT_STALL"
    grep -q "every rank stops with exit code 3 (stalled)" "$out" ||
        fail "the report does not say every rank stops"
    say "stall output checked: one report naming rank $EXPECT_STALL, exit code 3"
}

# --- teardown --------------------------------------------------------------

teardown() {
    local rc=$? pid pids
    trap - EXIT INT TERM
    set +e
    if [[ -n $SRUN_PID ]]; then
        kill -TERM "$SRUN_PID" 2>/dev/null
        wait_gone "$SRUN_PID" 15
    fi
    if ((DAEMONS_STARTED)); then
        timeout 10 scancel --full --quiet --user=root >/dev/null 2>&1
        stop_pid "$(pid_from_file "$WORK/slurmd.pid")" slurmd
        stop_pid "$(pid_from_file "$WORK/slurmctld.pid")" slurmctld
        # Anything left that carries our SLURM_CONF (slurmstepd, tasks).
        pids=$(our_processes)
        for pid in $pids; do
            say "killing leftover process $pid ($({ tr '\0' ' ' </proc/"$pid"/cmdline; } 2>/dev/null))"
            kill -KILL "$pid" 2>/dev/null
        done
    fi
    if [[ -n $MUNGED_PID ]]; then
        stop_pid "$MUNGED_PID" munged
    fi
    if ((DAEMONS_STARTED)) || [[ -n $MUNGED_PID ]]; then
        say "stopped the daemons this run started"
    fi
    if [[ -n $WORK && -d $WORK ]]; then
        if [[ ${SLURM_TEST_KEEP:-0} == 1 ]]; then
            say "kept $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$rc"
}

# --- main ------------------------------------------------------------------

main() {
    local expect_training=0
    if [[ ${1:-} == --expect-training ]]; then
        expect_training=1
        shift
    elif [[ ${1:-} == --expect-stall ]]; then
        [[ ${2:-} =~ ^[0-9]+$ ]] || usage
        EXPECT_STALL=$2
        shift 2
    fi
    (($# >= 1)) || usage
    if ((expect_training)); then
        ensure_root --expect-training "$@"
    elif [[ -n $EXPECT_STALL ]]; then
        ensure_root --expect-stall "$EXPECT_STALL" "$@"
    else
        ensure_root "$@"
    fi
    scrub_environment
    check_tools
    local bin
    bin=$(resolve_binary "$1")
    shift

    WORK=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen-slurm.XXXXXX")
    trap teardown EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    mkdir -p "$WORK/log"
    say "working in $WORK"

    if [[ $(id -u) -eq 0 ]]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi

    start_munge
    pick_ports
    write_slurm_conf
    check_pmix
    start_slurm
    wait_node_idle
    run_srun "$bin" "$@"
    if ((expect_training)); then check_training; fi
    if [[ -n $EXPECT_STALL ]]; then check_stall; fi
}

main "$@"
