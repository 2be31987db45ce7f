// JobScript: the Slurm batch script `fsdpgen SPEC -o train --sbatch job.sh`
// writes beside the binary (docs/multi-node.md). It asks for the plan's
// nodes and ranks per node, launches the binary with srun through PMIx in
// block order, and turns a time limit or a preemption into a checkpoint and
// a requeued job that resumes from it (--resume-if-exists).
#pragma once

#include <cstdint>
#include <string>

namespace fsdpgen {

struct JobScriptInput {
  std::string command;   // the fsdpgen command that writes it, for its header
  std::string revision;  // fsdpgen's
  std::string name;      // the job's (the spec's model)
  std::string binary;    // absolute
  std::string workdir;   // absolute: where the binary runs (relative paths in the spec)
  int64_t world = 1;
  int64_t ranks_per_node = 1;
  std::string sharding;
  bool cuda = false;
  std::string gpu;             // the plan's GPU, with cuda
  std::string checkpoint_dir;  // the spec's, relative to workdir or absolute
  // Seconds before the time limit that Slurm signals the job (--signal).
  int64_t signal_seconds = 120;
};

// The script's text (bash, #SBATCH lines first).
std::string job_script(const JobScriptInput& in);

}  // namespace fsdpgen
