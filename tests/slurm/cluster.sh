#!/usr/bin/env bash
# tests/slurm/cluster.sh: a throwaway Slurm cluster of several hosts on this
# machine, each host a set of Linux namespaces, and a command run on it.
#
#   bash tests/slurm/cluster.sh [--hosts N] [--cpus C] [--rate RATE] [--delay DELAY]
#                               [--subnet A.B.C] -- COMMAND [ARGS...]
#
# Makes, entirely inside a fresh temporary directory and namespaces it owns:
#   - a "head" host (the login node): network, UTS and mount namespaces with
#     a bridge br0 at A.B.C.1/24, running slurmctld; COMMAND runs here;
#   - hosts node1..nodeN: their own network, UTS (hostname nodeI) and mount
#     namespaces, each joined to the bridge by a veth pair (eth0 at
#     A.B.C.(10+I)), with its own /dev/shm (a tmpfs: shared memory does not
#     cross hosts, as on real ones), its own node-local directory (a tmpfs
#     on $WORK/local, Slurm's TmpFS, where PMIx keeps its files) and its own
#     slurmd (slurmd -N nodeI);
#   - a private /etc/hosts naming them, bind-mounted inside the namespaces
#     only; munge as run.sh has it (its socket is a file on the shared
#     filesystem, which every host sees, as a cluster's shared home).
# The namespaces have no route out: every packet of the cluster stays on the
# test's subnet (Open MPI and PMIx are also told to use it only).
# --rate (e.g. 200mbit) and --delay (e.g. 2ms; needs the netem qdisc) shape
# each host's link to the bridge, both ways; traffic within a host (shared
# memory) is not shaped.
#
# COMMAND runs on the head with SLURM_CONF set and:
#   CLUSTER_HOSTS   "node1 node2 ..."
#   CLUSTER_ON      a program: "$CLUSTER_ON nodeI CMD ARGS..." runs CMD on that host
#   CLUSTER_SHARED  a directory on the shared filesystem for the command's files
#   CLUSTER_SUBNET  A.B.C.0/24
# Its exit status is this script's (0 pass, 1 fail, 77 skip). Everything the
# script started (daemons, jobs, namespaces with their links and mounts) is
# removed on exit, also on failure, Ctrl-C and SIGTERM; nothing under /etc
# or /run is changed. 77 (printed "SKIPPED: <reason>") where this machine
# cannot run it: not root, Slurm, munge or iproute2 missing, namespaces or
# veth links not allowed.
#
# Knobs: CLUSTER_TEST_START_TIMEOUT (seconds for every node to be idle, 30),
# CLUSTER_TEST_RUN_TIMEOUT (seconds for COMMAND, 600), SLURM_TEST_KEEP=1.
set -euo pipefail

SLURM_TEST_PREFIX=slurm-cluster
# shellcheck source=tests/slurm/lib.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"

START_TIMEOUT=${CLUSTER_TEST_START_TIMEOUT:-30}
RUN_TIMEOUT=${CLUSTER_TEST_RUN_TIMEOUT:-600}
HOSTS=2
CPUS=""
RATE=""
DELAY=""
SUBNET=10.147.0

HEAD_PID=""       # the process holding the head's namespaces
HOST_PIDS=()      # the processes holding each host's namespaces
COMMAND_PID=""    # the command while it runs

usage() {
    echo "usage: bash tests/slurm/cluster.sh [--hosts N] [--cpus C] [--rate RATE]" \
         "[--delay DELAY] [--subnet A.B.C] -- COMMAND [ARGS...]" >&2
    exit 2
}

# --- namespaces ------------------------------------------------------------

# $1: a holder's pid; the rest: a command run in its namespaces.
in_ns() {
    local pid=$1
    shift
    nsenter --target "$pid" --net --uts --mount -- "$@"
}

# A process holding new network, UTS and mount namespaces (mounts private:
# nothing made in them shows outside); prints its pid.
new_namespaces() {
    local pid
    unshare --net --uts --mount --propagation private sleep infinity </dev/null >/dev/null 2>&1 &
    pid=$!
    # unshare execs sleep once the namespaces exist.
    for _ in $(seq 1 50); do
        [[ $(readlink "/proc/$pid/ns/net" 2>/dev/null) != "$(readlink /proc/self/ns/net)" ]] &&
            [[ $(command_of "$pid") == sleep* ]] && break
        sleep 0.1
    done
    echo "$pid"
}

# Makes namespaces here once, or skips saying why not.
check_namespaces() {
    local err
    if ! err=$(unshare --net --uts --mount --propagation private true 2>&1); then
        skip "cannot make network namespaces here (unshare --net --uts --mount: ${err:-failed})"
    fi
    if ! err=$(unshare --net sh -c 'ip link add fsdpgen0 type veth peer name fsdpgen1 &&
                                   ip link add fsdpgenbr type bridge' 2>&1); then
        skip "cannot make veth links or a bridge in a network namespace (${err:-failed})"
    fi
}

# $1: a holder's pid, $2: the hostname; the host's hostname, /etc/hosts,
# loopback.
host_basics() {
    in_ns "$1" hostname "$2"
    in_ns "$1" mount --bind "$WORK/hosts" /etc/hosts
    in_ns "$1" ip link set lo up
}

# $1: device, $2: the holder whose namespace has it.
shape_link() {
    local dev=$1 pid=$2 err
    [[ -z $RATE && -z $DELAY ]] && return 0
    if [[ -n $DELAY ]]; then
        err=$(in_ns "$pid" tc qdisc add dev "$dev" root netem delay "$DELAY" \
              ${RATE:+rate "$RATE"} 2>&1) ||
            skip "--delay needs the netem qdisc, which this kernel lacks ($err)"
    else
        in_ns "$pid" tc qdisc add dev "$dev" root tbf rate "$RATE" burst 64kb latency 100ms ||
            fail "tc could not shape $dev to $RATE"
    fi
}

make_network() {
    local i pid name
    {
        echo "127.0.0.1 localhost"
        echo "$SUBNET.1 head"
        for ((i = 1; i <= HOSTS; i++)); do echo "$SUBNET.$((10 + i)) node$i"; done
    } >"$WORK/hosts"
    mkdir -p "$WORK/local" "$WORK/spool"
    HEAD_PID=$(new_namespaces)
    host_basics "$HEAD_PID" head
    in_ns "$HEAD_PID" ip link add br0 type bridge
    in_ns "$HEAD_PID" ip addr add "$SUBNET.1/24" dev br0
    in_ns "$HEAD_PID" ip link set br0 up
    for ((i = 1; i <= HOSTS; i++)); do
        name=node$i
        pid=$(new_namespaces)
        HOST_PIDS+=("$pid")
        host_basics "$pid" "$name"
        # Shared memory and node-local files (Slurm's TmpFS: PMIx's
        # directories) stay on their host.
        in_ns "$pid" mount -t tmpfs -o size=512m,mode=1777 tmpfs /dev/shm
        in_ns "$pid" mount -t tmpfs -o size=256m,mode=1777 tmpfs "$WORK/local"
        mkdir -p "$WORK/spool/$name"
        in_ns "$HEAD_PID" ip link add "vh$i" type veth peer name eth0 netns "$pid"
        in_ns "$HEAD_PID" ip link set "vh$i" master br0
        in_ns "$HEAD_PID" ip link set "vh$i" up
        in_ns "$pid" ip addr add "$SUBNET.$((10 + i))/24" dev eth0
        in_ns "$pid" ip link set eth0 up
        shape_link "vh$i" "$HEAD_PID"
        shape_link eth0 "$pid"
    done
    say "made head ($SUBNET.1) and $HOSTS hosts node1..node$HOSTS ($SUBNET.11..)" \
        "${RATE:+, links shaped to $RATE}${DELAY:+, delay $DELAY}"
}

# Processes in any of our network namespaces other than their holders.
namespace_processes() {
    local f pid ns holders=" $HEAD_PID ${HOST_PIDS[*]} " nets=" "
    for pid in $holders; do
        ns=$(readlink "/proc/$pid/ns/net" 2>/dev/null) && nets+="$ns "
    done
    [[ $nets == " " ]] && return 0
    for f in /proc/[0-9]*/ns/net; do
        pid=${f#/proc/}; pid=${pid%/ns/net}
        [[ $holders == *" $pid "* ]] && continue
        ns=$(readlink "$f" 2>/dev/null) || continue
        [[ $nets == *" $ns "* ]] && echo "$pid"
    done
}

# --- slurm -----------------------------------------------------------------

write_slurm_conf() {
    local i cpus=${CPUS:-$(nproc)}
    {
        echo "# Generated by tests/slurm/cluster.sh; lives only for one test run."
        slurm_conf_common
        cat <<EOF
SlurmctldHost=head($SUBNET.1)
SlurmctldPort=6817
SlurmdPort=6818
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.%n.pid
SlurmdLogFile=$WORK/log/slurmd.%n.log
TmpFS=$WORK/local
EOF
        for ((i = 1; i <= HOSTS; i++)); do
            echo "NodeName=node$i NodeHostname=node$i NodeAddr=$SUBNET.$((10 + i))" \
                 "CPUs=$cpus RealMemory=$(node_memory "$HOSTS") State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } >"$WORK/slurm.conf"
    export SLURM_CONF=$WORK/slurm.conf
}

start_slurm() {
    local i
    DAEMONS_STARTED=1
    say "starting slurmctld on head and slurmd on node1..node$HOSTS"
    in_ns "$HEAD_PID" slurmctld -c -f "$SLURM_CONF" || fail "slurmctld did not start"
    for ((i = 1; i <= HOSTS; i++)); do
        in_ns "${HOST_PIDS[i - 1]}" slurmd -N "node$i" -f "$SLURM_CONF" ||
            fail "slurmd on node$i did not start"
    done
}

wait_nodes_idle() {
    local i idle states=""
    for ((i = 0; i < START_TIMEOUT * 2; i++)); do
        states=$(timeout 10 $SLURM_TEST_HEAD sinfo -h -N -o '%N=%T' 2>/dev/null | sort -u |
                 tr '\n' ' ' || true)
        idle=$(grep -o '=idle' <<<"$states" | wc -l || true)  # none yet: grep fails
        if ((idle == HOSTS)); then
            say "$HOSTS nodes idle after ~$((i / 2)) s"
            return 0
        fi
        sleep 0.5
    done
    fail "not every node idle after ${START_TIMEOUT} s (last: '${states:-none}')"
}

# The program COMMAND uses to run something on a host.
write_on() {
    local i
    {
        echo '#!/usr/bin/env bash'
        echo '# on HOST CMD...: run CMD in that host'"'"'s namespaces (written by cluster.sh)'
        echo 'case $1 in'
        echo "  head) pid=$HEAD_PID ;;"
        for ((i = 1; i <= HOSTS; i++)); do echo "  node$i) pid=${HOST_PIDS[i - 1]} ;;"; done
        echo '  *) echo "on: no host $1" >&2; exit 2 ;;'
        echo 'esac'
        echo 'shift'
        echo 'exec nsenter --target "$pid" --net --uts --mount -- "$@"'
    } >"$WORK/on"
    chmod +x "$WORK/on"
}

run_command() {
    local rc
    mkdir -p "$WORK/shared"
    chmod 0755 "$WORK/shared"
    export CLUSTER_HOSTS CLUSTER_ON=$WORK/on CLUSTER_SHARED=$WORK/shared
    export CLUSTER_SUBNET=$SUBNET.0/24
    CLUSTER_HOSTS=$(seq -f 'node%g' -s ' ' 1 "$HOSTS")
    # Open MPI and PMIx: the test's subnet only.
    export OMPI_MCA_btl_tcp_if_include=$CLUSTER_SUBNET OMPI_MCA_oob_tcp_if_include=$CLUSTER_SUBNET
    export PMIX_MCA_ptl_tcp_if_include=$CLUSTER_SUBNET
    say "running on head: $*"
    in_ns "$HEAD_PID" timeout -k 10 "$RUN_TIMEOUT" "$@" &
    COMMAND_PID=$!
    set +e
    wait "$COMMAND_PID"
    rc=$?
    set -e
    COMMAND_PID=""
    if ((rc == 124 || rc == 137)); then
        fail "the command timed out after ${RUN_TIMEOUT} s"
    elif ((rc == 77)); then
        exit 77
    elif ((rc != 0)); then
        fail "the command exited with status $rc"
    fi
    say "the command succeeded"
}

# --- teardown --------------------------------------------------------------

teardown() {
    local rc=$? pid pids files=("$WORK/slurmctld.pid")
    trap - EXIT INT TERM
    set +e
    if [[ -n $COMMAND_PID ]]; then
        kill -TERM "$COMMAND_PID" 2>/dev/null
        wait_gone "$COMMAND_PID" 15
    fi
    [[ -n $WORK ]] && files+=("$WORK"/slurmd.*.pid)
    teardown_slurm "${files[@]}"
    pids=$(namespace_processes)
    for pid in $pids; do
        say "killing leftover process $pid in the cluster ($(command_of "$pid"))"
        kill -KILL "$pid" 2>/dev/null
    done
    # The namespaces, their links, addresses and mounts go with their last process.
    for pid in $HEAD_PID "${HOST_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    for pid in $HEAD_PID "${HOST_PIDS[@]}"; do
        wait_gone "$pid" 5 || say "namespace holder $pid is still alive"
    done
    if [[ -n $HEAD_PID ]]; then say "removed the namespaces"; fi
    remove_work
    exit "$rc"
}

# --- main ------------------------------------------------------------------

main() {
    local args=("$@")
    while (($#)); do
        case $1 in
            --hosts) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || usage; HOSTS=$2; shift 2 ;;
            --cpus) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || usage; CPUS=$2; shift 2 ;;
            --rate) [[ -n ${2:-} ]] || usage; RATE=$2; shift 2 ;;
            --delay) [[ -n ${2:-} ]] || usage; DELAY=$2; shift 2 ;;
            --subnet) [[ ${2:-} =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || usage; SUBNET=$2; shift 2 ;;
            --) shift; break ;;
            *) usage ;;
        esac
    done
    (($# >= 1)) || usage
    ((HOSTS <= 200)) || usage
    ensure_root "$0" "${args[@]}"
    scrub_environment
    check_tools ip nsenter unshare tc
    check_namespaces

    WORK=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen-cluster.XXXXXX")
    trap teardown EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    mkdir -p "$WORK/log"
    say "working in $WORK"

    start_munge
    make_network
    SLURM_TEST_HEAD="nsenter --target $HEAD_PID --net --uts --mount --"
    write_slurm_conf
    check_pmix
    start_slurm
    wait_nodes_idle
    write_on
    run_command "$@"
}

main "$@"
