#!/usr/bin/env bash
# tests/slurm/multihost.sh: training runs that cross hosts, on the namespace
# cluster of tests/slurm/cluster.sh (2 hosts of 4 CPUs each).
#
#   bash tests/slurm/multihost.sh CASE FSDPGEN
#
# Started outside a cluster it runs itself inside a new one (cluster.sh
# --hosts 2 --cpus 4); inside, it builds what it needs from
# tests/slurm/hosts.fsdp with FSDPGEN (world 4, ranks_per_node 2,
# 2 micro-batches) into the cluster's shared directory and runs CASE:
#   losses   full_shard, hybrid_shard and hybrid_shard_zero2 under
#            srun -N 2 --ntasks-per-node 2 --mpi=pmix: the header says srun,
#            every step's loss equals (bit for bit, the --metrics values) the
#            one-host run's (mpirun -n 4 on node1), and the host links carried
#            the inter-host traffic
#   four     on 4 hosts (a cluster of its own): full_shard and hybrid_shard
#            planned for 4 nodes of 1 rank (ranks_per_node 1) under srun -N 4
#            --ntasks-per-node 1: every step's loss equals the one-host run's
#   mpirun   without Slurm: an sshd on each host, and full_shard and
#            hybrid_shard under mpirun -n 4 --hostfile (2 slots each)
#            --map-by ppr:2:node from node1, as docs/multi-node.md writes it:
#            the banner says mpirun and 2 hosts x 2 ranks, every step's loss
#            equals the one-host run's (skipped without sshd: the package
#            openssh-server, which tools/setup.sh installs only under CI=true)
#   resume   a checkpoint written by 4 ranks on 2 hosts, resumed on 1 host
#            with world 4 (losses bit for bit) and with world 2 (resharded;
#            within 1e-5 relative, as tests/e2e/CheckpointReshardTest)
#   kill     rank 3 (on node2) killed with SIGKILL in a running job: srun
#            ends the job within 60 s, non-zero, its first report naming
#            node2's task 3 killed (the
#            other ranks, stuck in a collective with the dead one, get
#            srun's SIGTERM, cannot finish their step, and Slurm kills them
#            after KillWait)
#   placement  the placement check (runtime/placement.h): hybrid_shard under
#            --distribution=cyclic (shard groups across hosts) and full_shard
#            with 3 + 1 ranks per host stop with exit code 2 before the first
#            step, naming where each rank runs and the srun flags of the
#            planned placement; --allow-placement runs the cyclic one with a
#            warning; the banners of the losses case say the placement
#   stall    rank 3 (on node2) stalls: the watchdog, its job directory on the
#            shared filesystem (checkpoints there; /dev/shm is each host's
#            own), ends every rank with exit code 3 and one report naming
#            rank 3 and every rank answering, on both hosts
#   sbatch   the job script of `fsdpgen SPEC -o train --sbatch job.sh`,
#            submitted with sbatch, requeued mid-run by `scontrol requeue`
#            (SIGTERM) and then by its own time-limit signal (SIGUSR1 to the
#            batch script, as `--signal=B:USR1@120` sends it): the job starts
#            3 times, each stop writes a checkpoint, each start resumes from
#            it, and its losses equal an uninterrupted srun run's, bit for bit
# Exit status: 0 pass, 1 fail (the outputs printed), 77 skip (from cluster.sh).
set -euo pipefail

HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")

usage() {
    echo "usage: bash tests/slurm/multihost.sh losses|four|mpirun|resume|kill|stall|placement|sbatch FSDPGEN" >&2
    exit 2
}

(($# == 2)) || usage
CASE=$1
FSDPGEN=$(readlink -f "$2")
case $CASE in losses|four|mpirun|resume|kill|stall|placement|sbatch) ;; *) usage ;; esac
[[ -x $FSDPGEN ]] || { echo "multihost: $2 is not an executable" >&2; exit 2; }

if [[ -z ${CLUSTER_ON:-} ]]; then
    if [[ $CASE == four ]]; then
        exec bash "$HERE/cluster.sh" --hosts 4 --cpus 2 -- bash "$HERE/multihost.sh" "$CASE" "$FSDPGEN"
    fi
    exec bash "$HERE/cluster.sh" --hosts 2 --cpus 4 -- bash "$HERE/multihost.sh" "$CASE" "$FSDPGEN"
fi

S=$CLUSTER_SHARED
SRUN_TIMEOUT=120

say() { echo "multihost: $*"; }
fail() {
    local f
    echo "multihost: FAILED ($CASE): $1" >&2
    shift
    for f in "$@"; do
        [[ -s $f ]] || continue
        echo "----- $f (last 40 lines) -----" >&2
        tail -n 40 "$f" >&2
    done
    exit 1
}

# $1: the binary's name, $2: sharding; the rest: fsdpgen flags. RANKS_PER_NODE
# (default: the spec's 2) replaces the spec's ranks_per_node.
build() {
    local name=$1 sharding=$2 rpn=${RANKS_PER_NODE:-2}
    shift 2
    sed -E -e "s/^( *sharding *= *)hybrid_shard\$/\\1$sharding/" \
        -e "s/^( *ranks_per_node *= *)2( .*)?\$/\\1$rpn/" "$HERE/hosts.fsdp" >"$S/$name.fsdp"
    grep -qE "^ *sharding *= *$sharding\$" "$S/$name.fsdp" || fail "could not set sharding $sharding"
    grep -qE "^ *ranks_per_node *= *$rpn\$" "$S/$name.fsdp" || fail "could not set ranks_per_node $rpn"
    "$FSDPGEN" "$S/$name.fsdp" --target cpu -o "$S/$name" "$@" >"$S/$name.build" 2>&1 ||
        fail "fsdpgen could not build $name" "$S/$name.build"
}

# $1: output file; the rest: srun's arguments. Prints srun's status.
srun_to() {
    local out=$1 rc=0
    shift
    timeout -k 10 "$SRUN_TIMEOUT" srun --mpi=pmix --kill-on-bad-exit=1 "$@" >"$out" 2>&1 || rc=$?
    ((rc != 124 && rc != 137)) || fail "srun $* timed out after $SRUN_TIMEOUT s" "$out"
    echo "$rc"
}

# Bytes through the hosts' links (both ways), as the head's bridge ports count them.
link_bytes() {
    awk '$1 ~ /^vh[0-9]+:$/ { sum += $2 + $10 } END { printf "%d", sum }' /proc/net/dev
}

# $1, $2: --metrics files; $3: first step to compare; $4: relative tolerance
# (0: the same values as written). Prints how many steps matched.
compare_losses() {
    python3 - "$@" <<'EOF'
import json, sys
a_path, b_path, first, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def losses(path):
    with open(path) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, f) if r["step"] >= first}
a, b = losses(a_path), losses(b_path)
if not a or sorted(a) != sorted(b):
    sys.exit(f"steps differ: {sorted(a)} in {a_path}, {sorted(b)} in {b_path}")
for s in sorted(a):
    x, y = a[s], b[s]
    bad = (x != y) if tol == 0 else (abs(x - y) > tol * abs(x))
    if bad:
        sys.exit(f"step {s}: loss {x!r} in {a_path}, {y!r} in {b_path} (tolerance {tol})")
print(len(a))
EOF
}

expect_header() {
    grep -qE "^  4 ranks \(.*\), launched by $2, " "$1" ||
        fail "$1: the header does not say 4 ranks launched by $2" "$1"
}

# $1: a binary: runs it on 4 ranks of node1 alone (mpirun), its output in
# $1.one and its metrics in $1.one.jsonl, which expect_as_one_host compares with.
one_host() {
    local rc=0
    timeout -k 10 "$SRUN_TIMEOUT" "$CLUSTER_ON" node1 mpirun -n 4 --oversubscribe \
        "$1" --metrics "$1.one.jsonl" >"$1.one" 2>&1 || rc=$?
    ((rc == 0)) || fail "mpirun -n 4 on node1 ($(basename "$1")) exited with $rc" "$1.one"
    expect_header "$1.one" mpirun
}

# $1: a binary, $2: a run's output (its metrics in $2.jsonl), $3: its
# launcher, $4: the banner's placement. Checks the header and the banner, and
# that every step's loss is one_host's; sets `compared` to the steps compared.
expect_as_one_host() {
    expect_header "$2" "$3"
    grep -qxF "  placement: $4" "$2" || fail "the banner does not say placement: $4" "$2"
    compared=$(compare_losses "$1.one.jsonl" "$2.jsonl" 1 0) ||
        fail "the losses of $2 are not the one-host run's" "$1.one" "$2"
}

case_losses() {
    local sharding before after rc
    for sharding in full_shard hybrid_shard hybrid_shard_zero2; do
        build "$sharding" "$sharding"
        # One host: every rank on node1, shared memory between them.
        one_host "$S/$sharding"
        grep -qxF "  placement: 1 host x 4 ranks (planned as 2 nodes x 2 ranks)" "$S/$sharding.one" ||
            fail "$sharding: the one-host banner does not say its placement" "$S/$sharding.one"
        before=$(link_bytes)
        rc=$(srun_to "$S/$sharding.two" -N 2 --ntasks-per-node 2 "$S/$sharding" \
             --metrics "$S/$sharding.two.jsonl")
        after=$(link_bytes)
        ((rc == 0)) || fail "srun -N 2 ($sharding) exited with $rc" "$S/$sharding.two"
        expect_as_one_host "$S/$sharding" "$S/$sharding.two" srun "2 hosts x 2 ranks"
        # The parameters alone are 139 kB in fp32: 6 steps of sharded
        # collectives between the hosts move far more than 100 kB.
        ((after - before > 100000)) ||
            fail "$sharding: only $((after - before)) bytes crossed the host links" "$S/$sharding.two"
        say "$sharding: $compared steps, losses across 2 hosts x 2 ranks equal the one-host run's;" \
            "$((after - before)) bytes crossed the host links"
    done
}

case_four() {
    local sharding rc
    for sharding in full_shard hybrid_shard; do
        RANKS_PER_NODE=1 build "four_$sharding" "$sharding"
        one_host "$S/four_$sharding"
        rc=$(srun_to "$S/four_$sharding.four" -N 4 --ntasks-per-node 1 "$S/four_$sharding" \
             --metrics "$S/four_$sharding.four.jsonl")
        ((rc == 0)) || fail "srun -N 4 ($sharding) exited with $rc" "$S/four_$sharding.four"
        expect_as_one_host "$S/four_$sharding" "$S/four_$sharding.four" srun "4 hosts x 1 rank"
        say "$sharding: $compared steps, losses across 4 hosts x 1 rank equal the one-host run's"
    done
}

# An sshd on every host of the cluster, root's login by a key of the test's
# own (ssh -F $S/ssh/config); stopped by stop_sshd, and by the cluster's
# teardown after a failure.
start_sshd() {
    local h addr
    [[ -x /usr/sbin/sshd ]] || {
        echo "multihost: SKIPPED: no /usr/sbin/sshd (the package openssh-server; tools/setup.sh" \
             "installs it under CI=true only, as elsewhere it may start an ssh server)"
        exit 77
    }
    mkdir -p "$S/ssh" /run/sshd && chmod 700 "$S/ssh"
    ssh-keygen -q -t ed25519 -N '' -f "$S/ssh/id" >/dev/null
    ssh-keygen -q -t ed25519 -N '' -f "$S/ssh/host" >/dev/null
    cp "$S/ssh/id.pub" "$S/ssh/authorized_keys"
    printf 'Host *\n  IdentityFile %s\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n' \
        "$S/ssh/id" >"$S/ssh/config"
    for h in $CLUSTER_HOSTS; do
        addr=$(getent hosts "$h" | awk '{print $1}')
        printf '%s\n' "ListenAddress $addr" "HostKey $S/ssh/host" "PidFile $S/ssh/$h.pid" \
            "AuthorizedKeysFile $S/ssh/authorized_keys" "PermitRootLogin prohibit-password" \
            "StrictModes no" "UsePAM no" "PasswordAuthentication no" >"$S/ssh/$h.conf"
        "$CLUSTER_ON" "$h" /usr/sbin/sshd -f "$S/ssh/$h.conf" -E "$S/ssh/$h.log" ||
            fail "sshd did not start on $h" "$S/ssh/$h.log"
    done
    [[ $("$CLUSTER_ON" node1 ssh -F "$S/ssh/config" node2 hostname 2>&1) == node2 ]] ||
        fail "ssh from node1 to node2 failed" "$S/ssh/node2.log"
}

stop_sshd() {
    local h
    for h in $CLUSTER_HOSTS; do
        [[ -s $S/ssh/$h.pid ]] && kill "$(cat "$S/ssh/$h.pid")" 2>/dev/null || true
    done
}

case_mpirun() {
    local sharding rc out
    start_sshd
    printf 'node1 slots=2\nnode2 slots=2\n' >"$S/hostfile"
    for sharding in full_shard hybrid_shard; do
        build "$sharding" "$sharding"
        one_host "$S/$sharding"
        out=$S/$sharding.hostfile
        rc=0
        timeout -k 10 "$SRUN_TIMEOUT" "$CLUSTER_ON" node1 mpirun -n 4 --hostfile "$S/hostfile" \
            --map-by ppr:2:node --mca plm_rsh_args "-F $S/ssh/config" \
            "$S/$sharding" --metrics "$S/$sharding.hostfile.jsonl" >"$out" 2>&1 || rc=$?
        ((rc == 0)) || fail "mpirun --hostfile ($sharding) exited with $rc" "$out"
        expect_as_one_host "$S/$sharding" "$out" mpirun "2 hosts x 2 ranks"
        say "$sharding: $compared steps under mpirun --hostfile on 2 hosts x 2 ranks equal the one-host run's"
    done
    stop_sshd
}

case_resume() {
    local rc n
    build full_shard full_shard
    build world2 full_shard --world 2 --micro-batch 4  # the same global batch
    rc=$(srun_to "$S/written" -N 2 --ntasks-per-node 2 "$S/full_shard" \
         --checkpoint-every 3 --checkpoint-dir "$S/ckpt" --metrics "$S/written.jsonl")
    ((rc == 0)) || fail "the run writing checkpoints on 2 hosts exited with $rc" "$S/written"
    [[ -f $S/ckpt/step_00000003/manifest.json ]] || fail "no checkpoint $S/ckpt/step_00000003" "$S/written"
    # World 4 on one host: the same binary continues bit for bit.
    rc=$(srun_to "$S/same" -N 1 -n 4 "$S/full_shard" --resume "$S/ckpt/step_00000003" \
         --checkpoint-dir "$S/ckpt_same" --metrics "$S/same.jsonl")
    ((rc == 0)) || fail "resuming with world 4 on 1 host exited with $rc" "$S/same"
    n=$(compare_losses "$S/written.jsonl" "$S/same.jsonl" 4 0) ||
        fail "world 4 on 1 host did not continue the 2-host run bit for bit" "$S/written" "$S/same"
    say "checkpoint of 2 hosts x 2 ranks resumed by 1 host x 4 ranks: $n steps bit for bit"
    # World 2 on one host: resharded.
    rc=$(srun_to "$S/world2.out" -N 1 -n 2 "$S/world2" --resume "$S/ckpt/step_00000003" \
         --checkpoint-dir "$S/ckpt_world2" --metrics "$S/world2.jsonl")
    ((rc == 0)) || fail "resuming with world 2 on 1 host exited with $rc" "$S/world2.out"
    n=$(compare_losses "$S/written.jsonl" "$S/world2.jsonl" 4 1e-5) ||
        fail "world 2 on 1 host strayed from the 2-host run" "$S/written" "$S/world2.out"
    say "checkpoint of 2 hosts x 2 ranks resumed by 1 host x 2 ranks: $n steps within 1e-5"
}

# The pid of task $1 of this cluster's job on host $2 (empty while none).
task_pid() {
    local rank=$1 net f pid env
    net=$("$CLUSTER_ON" "$2" readlink /proc/self/ns/net)
    for f in /proc/[0-9]*/environ; do
        pid=${f#/proc/}; pid=${pid%/environ}
        [[ $(readlink "/proc/$pid/ns/net" 2>/dev/null) == "$net" ]] || continue
        env=$({ tr '\0' '\n' <"$f"; } 2>/dev/null) || continue
        grep -qxF "SLURM_CONF=$SLURM_CONF" <<<"$env" || continue
        grep -qxF "SLURM_PROCID=$rank" <<<"$env" || continue
        [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$S/full_shard" ]] || continue
        echo "$pid"
        return 0
    done
}

case_kill() {
    local out=$S/killed pid="" srun_pid rc=0 i start
    build full_shard full_shard
    timeout -k 10 "$SRUN_TIMEOUT" srun --mpi=pmix --kill-on-bad-exit=1 -N 2 --ntasks-per-node 2 \
        "$S/full_shard" --steps 100000 --metrics "$S/killed.jsonl" >"$out" 2>&1 &
    srun_pid=$!
    # Mid-run: step 3 is in the metrics file (flushed every step; stdout is not).
    for ((i = 0; i < 300; i++)); do
        [[ -s $S/killed.jsonl ]] && (($(wc -l <"$S/killed.jsonl") >= 3)) &&
            pid=$(task_pid 3 node2) && [[ -n $pid ]] && break
        kill -0 "$srun_pid" 2>/dev/null || break
        sleep 0.1
    done
    [[ -n $pid ]] || { kill "$srun_pid" 2>/dev/null; fail "no rank 3 running on node2" "$out"; }
    start=$SECONDS
    kill -KILL "$pid"
    wait "$srun_pid" || rc=$?
    # srun's own status is 137 when tasks were killed (SIGKILL after KillWait):
    # the time tells a timeout apart.
    ((SECONDS - start < 60)) || fail "the job did not end within 60 s of rank 3's death" "$out"
    ((rc != 0)) || fail "srun exited 0 after rank 3 was killed" "$out"
    # The first task srun reports is the killed one (Slurm kills the others after it).
    [[ $(grep -m 1 -E '^srun: error: node[0-9]+: tasks? ' "$out") == \
       "srun: error: node2: task 3: Killed" ]] ||
        fail "srun's first report is not node2's task 3 killed" "$out"
    ! grep -qE '^done: ' "$out" || fail "the run finished although rank 3 was killed" "$out"
    say "rank 3 (pid $pid on node2) killed: srun exited $rc after $((SECONDS - start)) s," \
        "naming node2: task 3: Killed"
}

# The stall and the refused launches run with --kill-on-bad-exit=0 (srun
# takes the last value given): every rank must exit with the code on its own.
# With srun_to's default of 1, srun terminates the ranks still exiting once
# the first has, and its status is then 143 (SIGTERM) or the code, by a race.
case_stall() {
    local out=$S/stalled rc r
    build full_shard full_shard
    rc=$(srun_to "$out" --kill-on-bad-exit=0 -N 2 --ntasks-per-node 2 "$S/full_shard" --steps 8 \
         --stall-timeout 2 --inject-stall 3:2:100 --checkpoint-every 100 --checkpoint-dir "$S/ckpt")
    ((rc == 3)) || fail "srun exited with $rc, not the watchdog's 3 (stalled)" "$out"
    (($(grep -cE '^stall at step [0-9]+: ' "$out") == 1)) || fail "not one stall report" "$out"
    grep -qE '^stall at step [0-9]+: rank 3 has been in op ' "$out" ||
        fail "the report does not name rank 3" "$out"
    for r in 0 1 2 3; do
        grep -qE "^  rank $r \(pid [0-9]+ on node$((r / 2 + 1))\): step [0-9]+, answering;" "$out" ||
            fail "the report does not show rank $r answering on node$((r / 2 + 1))" "$out"
    done
    say "rank 3 on node2 stalled: one report from the shared job directory naming rank 3," \
        "ranks 0-3 answering on node1 and node2, exit code 3"
}

# $1: output; $2: the error's expected text (fixed).
expect_refused() {
    grep -qF "$2" "$1" || fail "the error does not say: $2" "$1"
    ! grep -qE '^step 1/' "$1" || fail "a step ran before the placement error" "$1"
}

case_placement() {
    local rc out
    build hybrid_shard hybrid_shard
    build full_shard full_shard
    # Shard groups {0, 1} and {2, 3} across node1 and node2.
    out=$S/cyclic
    rc=$(srun_to "$out" --kill-on-bad-exit=0 -N 2 --ntasks-per-node 2 --distribution=cyclic \
         "$S/hybrid_shard" --steps 2)
    ((rc == 2)) || fail "srun --distribution=cyclic of hybrid_shard exited $rc, not 2" "$out"
    expect_refused "$out" "error: placement: the ranks run on 2 hosts x 2 ranks (node1: ranks 0, 2; node2: ranks 1, 3), so shard group 0 (ranks 0, 1) spans 2 hosts (node1, node2) where the plan has it on one node (ranks_per_node 2)"
    expect_refused "$out" "launch with: srun -N 2 --ntasks-per-node 2 --distribution=block --mpi=pmix $S/hybrid_shard, or mpirun -n 4 --map-by ppr:2:node"
    expect_refused "$out" "; --allow-placement runs it as placed"
    (($(grep -c 'error: placement' "$out") == 1)) || fail "the error is not said once" "$out"
    say "hybrid_shard with --distribution=cyclic: refused (exit 2), shard group 0 named across node1 and node2"
    # Allowed: a warning, and the run goes on.
    out=$S/cyclic.allowed
    rc=$(srun_to "$out" -N 2 --ntasks-per-node 2 --distribution=cyclic "$S/hybrid_shard" --steps 2 \
         --allow-placement)
    ((rc == 0)) || fail "--allow-placement: srun exited $rc" "$out"
    grep -qF "warning: placement: the ranks run on 2 hosts x 2 ranks (node1: ranks 0, 2; node2: ranks 1, 3)" "$out" ||
        fail "--allow-placement: no warning naming the placement" "$out"
    grep -qE '^done: 2 steps ' "$out" || fail "--allow-placement: the run did not finish" "$out"
    say "hybrid_shard with --distribution=cyclic --allow-placement: warned, 2 steps ran"
    # 3 ranks on node1, 1 on node2, for a plan of 2 per node.
    out=$S/uneven
    rc=$(srun_to "$out" --kill-on-bad-exit=0 -N 2 -n 4 --ntasks-per-node 3 "$S/full_shard" --steps 2)
    ((rc == 2)) || fail "full_shard on 3 + 1 ranks exited $rc, not 2" "$out"
    expect_refused "$out" "error: placement: the ranks run on 2 hosts (node1: ranks 0-2; node2: rank 3), but the plan puts 2 ranks on each node (ranks_per_node 2)"
    say "full_shard on 3 + 1 ranks per host: refused (exit 2), the counts named"
}

# $1: a job id, $2: a field of `scontrol show job` (e.g. JobState). Prints its value.
job_field() {
    scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# $1: file, $2: lines it must reach, $3: job id, $4: what for. Waits up to 120 s.
wait_lines() {
    local i
    for ((i = 0; i < 1200; i++)); do
        [[ -s $1 ]] && (($(wc -l <"$1") >= $2)) && return 0
        [[ $(job_field "$3" JobState) =~ ^(RUNNING|PENDING|CONFIGURING|REQUEUED|COMPLETING)$ ]] ||
            fail "job $3 is $(job_field "$3" JobState) while waiting for $4" "$S/hosts-$3.log"
        sleep 0.1
    done
    fail "$1 did not reach $2 lines ($4)" "$S/hosts-$3.log"
}

# $1: a job id requeued for the $2-th time: once it is pending again, makes it
# eligible now (Slurm holds a requeued job back for 2 minutes), then waits
# for start $2 + 1 to run. The start time is set again each second while the
# job waits: in CI (2026-11-28) a single update let start 3 wait past the 120 s
# this function allows, likely (not proven) because slurmctld sets a passed
# start time forward again by the credential lifetime (120 s) when the
# requeued start's clean-up ends, undoing an update made before that.
rerun_now() {
    local job=$1 restarts=$2 log=$S/hosts-$1.log i state
    for ((i = 0; i < 600; i++)); do
        [[ $(job_field "$job" Restarts) == "$restarts" && $(job_field "$job" JobState) == PENDING ]] &&
            break
        sleep 0.1
    done
    ((i < 600)) || fail "job $job is not pending after requeue $restarts" "$log"
    # slurmd refuses to launch a batch job whose credential dates from the
    # second of the job's last kill ("Killing non-startable batch JobId=N: Job
    # credential revoked"; the job then ends FAILED, CI saw it once): Slurm's
    # own requeue waits cred_expire for that, so before making the job
    # eligible now let the nodes go idle and 2 s pass.
    for ((i = 0; i < 300; i++)); do
        [[ -z $(sinfo -h -N -o '%T' 2>/dev/null | grep -vx idle) ]] && break
        sleep 0.1
    done
    sleep 2
    for ((i = 0; i < 1200; i++)); do
        state=$(job_field "$job" JobState)
        [[ $state == RUNNING ]] &&
            grep -q "^fsdpgen job $job: start $((restarts + 1)) " "$log" 2>/dev/null && return 0
        if [[ $state == PENDING ]] && ((i % 10 == 0)); then
            scontrol update jobid="$job" StartTime=now ||
                fail "could not make job $job eligible now" "$log"
        fi
        sleep 0.1
    done
    scontrol show job "$job" >"$S/job-$job.show" 2>&1
    fail "job $job did not start again after requeue $restarts" "$log" "$S/job-$job.show"
}

# Waits up to 30 s until no job is queued and every node is idle again: a
# step's clean-up on the hosts (Open MPI's session directories among it) may
# outlast its srun, and a job started on a host before it ends once died in
# Open MPI's shared-memory set-up (open(2): no such file or directory).
wait_idle() {
    local i
    for ((i = 0; i < 300; i++)); do
        [[ -z $(squeue -h 2>/dev/null) && -z $(sinfo -h -N -o '%T' 2>/dev/null | grep -vx idle) ]] &&
            return 0
        sleep 0.1
    done
    fail "the nodes are not idle 30 s after the last run: $(sinfo -h -N -o '%N %T' | tr '\n' ' ')"
}

case_sbatch() {
    local steps=400 job rc i n log lines state
    # In the shared directory: the script runs (and logs) where fsdpgen ran.
    (cd "$S" && build train full_shard --sbatch job.sh)
    grep -qxF "fsdpgen: wrote job.sh, a Slurm batch script for 2 nodes x 2 ranks: sbatch job.sh" \
        "$S/train.build" || fail "fsdpgen did not say it wrote job.sh" "$S/train.build"
    # The same run straight through.
    rc=$(srun_to "$S/straight" -N 2 --ntasks-per-node 2 "$S/train" --steps "$steps" \
         --metrics "$S/straight.jsonl")
    ((rc == 0)) || fail "the straight run exited with $rc" "$S/straight"
    wait_idle
    job=$(cd "$S" && sbatch --parsable job.sh --steps "$steps" --metrics job.jsonl) ||
        fail "sbatch job.sh failed"
    log=$S/hosts-$job.log
    # Start 1: preempted by a requeue (SIGTERM to the job's processes).
    wait_lines "$S/job.jsonl" 5 "$job" "start 1's steps"
    scontrol requeue "$job" || fail "scontrol requeue $job failed" "$log"
    # Start 2: stopped by the time-limit signal, which the script turns into a requeue.
    rerun_now "$job" 1
    lines=$(wc -l <"$S/job.jsonl")
    wait_lines "$S/job.jsonl" $((lines + 5)) "$job" "start 2's steps"
    scancel --batch --signal=USR1 "$job" || fail "scancel --batch --signal=USR1 $job failed" "$log"
    # Start 3 runs to the end.
    rerun_now "$job" 2
    for ((i = 0; i < 1800; i++)); do
        state=$(job_field "$job" JobState)
        [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED ]] && break
        sleep 0.1
    done
    [[ $state == COMPLETED ]] || fail "job $job ended $state (restarts $(job_field "$job" Restarts))" "$log"
    [[ $(job_field "$job" Restarts) == 2 ]] ||
        fail "job $job restarted $(job_field "$job" Restarts) times, not 2" "$log"
    for i in 1 2 3; do
        grep -q "^fsdpgen job $job: start $i on node\[1-2\], " "$log" ||
            fail "the log does not show start $i on node[1-2]" "$log"
    done
    # The spec writes no checkpoints of its own: each one a start resumed from
    # was written by the stop before it. (srun, itself signalled by the
    # requeue, may not pass on the ranks' last lines: start 1's stop message
    # is not required, start 2's resume is.)
    local first second
    first=$(sed -nE 's#^  data: .*weights: resumed from ckpt/step_0*([0-9]+) .*#\1#p' "$log" | sed -n 1p)
    second=$(sed -nE 's#^  data: .*weights: resumed from ckpt/step_0*([0-9]+) .*#\1#p' "$log" | sed -n 2p)
    [[ -n $first ]] && ((first >= 5)) ||
        fail "start 2 did not resume from the checkpoint of start 1's stop (step ${first:-none})" "$log"
    grep -qF "fsdpgen job $job: SIGUSR1 (the time limit is near): the ranks stop with a checkpoint" \
        "$log" || fail "the script did not say it passed SIGUSR1 on" "$log"
    # (srun signals each rank; one that had not received it yet when the ranks
    # agreed to stop is counted.)
    grep -qE "^stopped after step $second of $steps: asked to by SIGUSR1( \([0-9] of 4 ranks had received it\))?; " "$log" ||
        fail "start 2 did not stop with a checkpoint on SIGUSR1" "$log"
    [[ -n $second ]] && ((second > first)) ||
        fail "start 3 did not resume from the checkpoint of start 2's stop (step ${second:-none})" "$log"
    grep -qF "fsdpgen job $job: stopped with a checkpoint; requeued" "$log" ||
        fail "the script did not requeue the job" "$log"
    grep -qF -- "--resume-if-exists: no checkpoint in ckpt, so the run starts afresh" "$log" ||
        fail "start 1 did not start afresh" "$log"
    (($(grep -c '^  placement: 2 hosts x 2 ranks$' "$log") == 3)) ||
        fail "not every start ran on 2 hosts x 2 ranks" "$log"
    grep -qE "^done: " "$log" || fail "the last start did not finish" "$log"
    n=$(compare_losses "$S/straight.jsonl" "$S/job.jsonl" 1 0) ||
        fail "the requeued job's losses are not the straight run's" "$log" "$S/straight"
    ((n == steps)) || fail "$n steps compared, not $steps" "$log"
    say "sbatch job.sh: requeued by scontrol (SIGTERM) and by its time-limit signal (SIGUSR1)," \
        "3 starts on 2 hosts x 2 ranks, $n steps' losses equal the straight run's bit for bit"
}

start=$SECONDS
"case_$CASE"
say "$CASE passed in $((SECONDS - start)) s"
