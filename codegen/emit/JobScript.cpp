// JobScript: the Slurm batch script of a plan (JobScript.h).
#include "codegen/emit/JobScript.h"

#include <fmt/format.h>

#include "runtime/human.h"

namespace fsdpgen {
namespace {

// One word for bash: bare where it holds nothing bash reads, else in single quotes.
std::string shell_word(const std::string& s) {
  const bool bare = !s.empty() && s.find_first_not_of(
                                      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
                                      "qrstuvwxyz0123456789_./+-@%:,=") == std::string::npos;
  if (bare) return s;
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string job_script(const JobScriptInput& in) {
  const int64_t nodes = in.world / in.ranks_per_node;
  const std::string target = in.cuda ? fmt::format("CUDA ({})", in.gpu) : "the CPU";
  std::string s = fmt::format(
      R"sh(#!/bin/bash
# A Slurm batch script for {binary}, written by
#   {command}
# (fsdpgen {revision}). Its plan: world {world} = {placement}
# (ranks_per_node), {sharding}, for {target}.
#
#   sbatch JOB [FLAGS]                     FLAGS go to the binary (e.g. --steps 5000)
#   sbatch -p PART -A ACCOUNT -t 4:00:00 JOB   sbatch's options override the lines below
#
# A time limit: Slurm sends this script SIGUSR1 {signal} s before it; the script
# passes it to the ranks, which stop after the step in progress with a
# checkpoint in {ckpt}, and then requeues the job. A preemption that requeues it
# (or scontrol requeue) sends SIGTERM, which stops the ranks the same way: the
# cluster's KillWait must leave them the time to write it. Every start runs the
# binary with --resume-if-exists: the first starts afresh, the others continue
# from the newest checkpoint, bit for bit. Each start appends to the log.
#SBATCH --job-name={name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={rpn}
)sh",
      fmt::arg("binary", in.binary), fmt::arg("command", in.command),
      fmt::arg("revision", in.revision), fmt::arg("world", in.world), fmt::arg("nodes", nodes),
      fmt::arg("placement", plural(nodes, "node") + " x " + plural(in.ranks_per_node, "rank")),
      fmt::arg("rpn", in.ranks_per_node), fmt::arg("sharding", in.sharding),
      fmt::arg("target", target), fmt::arg("signal", in.signal_seconds),
      fmt::arg("ckpt", in.checkpoint_dir), fmt::arg("name", shell_word(in.name)));
  // NCCL gives each rank the GPU of its local rank: every task sees the node's GPUs.
  if (in.cuda) s += fmt::format("#SBATCH --gpus-per-node={}\n", in.ranks_per_node);
  // sbatch runs the job (and opens its log) there; a directory an #SBATCH
  // line cannot carry bare is left to the cd below, and the log goes where
  // sbatch runs.
  const std::string workdir_word = shell_word(in.workdir);
  const std::string chdir =
      workdir_word == in.workdir ? fmt::format("#SBATCH --chdir={}\n", in.workdir) : "";
  s += fmt::format(
      R"sh(#SBATCH --exclusive
#SBATCH --signal=B:USR1@{signal}
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.log
{chdir}
set -u
cd {workdir_word} || exit 1
echo "fsdpgen job $SLURM_JOB_ID: start $((${{SLURM_RESTART_COUNT:-0}} + 1)) on $SLURM_JOB_NODELIST, $(date -Is)"

# Each rank's threads: its share of the node's CPUs.
cpus=$((${{SLURM_CPUS_ON_NODE:-{rpn}}} / {rpn}))
((cpus >= 1)) || cpus=1
export OMP_NUM_THREADS=$cpus
# MPI and NCCL pick their network interfaces themselves; on nodes with several,
# name the one between nodes, e.g.:
#   export OMPI_MCA_btl_tcp_if_include=ib0 NCCL_SOCKET_IFNAME=ib0

time_limit=0 signalled=0
trap 'signalled=1 time_limit=1; echo "fsdpgen job $SLURM_JOB_ID: SIGUSR1 (the time limit is near): the ranks stop with a checkpoint"; kill -USR1 "$srun_pid" 2>/dev/null' USR1
trap 'signalled=1; echo "fsdpgen job $SLURM_JOB_ID: SIGTERM (a requeue, preemption or scancel): the ranks stop with a checkpoint"' TERM
# The watchdog's files in the shared working directory, so that a stall report
# names the ranks of every node (unless the flags give --watch-dir).
watch=(--watch-dir "$PWD")
for arg in "$@"; do [[ $arg == --watch-dir* ]] && watch=(); done
srun --mpi=pmix --distribution=block --cpus-per-task="$cpus" --kill-on-bad-exit=1 \
    {binary} --resume-if-exists ${{watch[@]+"${{watch[@]}}"}} "$@" &
srun_pid=$!
# A trapped signal ends a wait early: wait again for srun's own status.
while :; do
    signalled=0
    wait "$srun_pid"
    rc=$?
    ((signalled && rc > 128)) || break
done
if ((time_limit && rc == 0)); then
    echo "fsdpgen job $SLURM_JOB_ID: stopped with a checkpoint; requeued"
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$rc"
)sh",
      fmt::arg("signal", in.signal_seconds), fmt::arg("chdir", chdir),
      fmt::arg("workdir_word", workdir_word), fmt::arg("rpn", in.ranks_per_node),
      fmt::arg("binary", shell_word(in.binary)));
  return s;
}

}  // namespace fsdpgen
