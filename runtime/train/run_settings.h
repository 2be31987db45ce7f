// run_settings: the run as launched (its length, data, validation,
// checkpoints, outputs and global batch): the binary's flags resolved over
// the spec's values, recorded in every checkpoint (checkpoint_run), and on
// --resume taken back from the checkpoint, each flag given overriding its
// value with a warning where that changes the run. A requeued job that runs
// `./train --resume` trains the run it interrupted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/files/checkpoint_files.h"
#include "runtime/program.h"

// The flags that shape a run, as given: -1, "" or {} where not given.
struct run_flags {
  int64_t steps = -1;
  std::vector<std::string> data;
  std::string shuffle;  // "", "true" or "false"
  std::vector<std::string> val;
  int64_t val_every = -1;
  int64_t val_sequences = -1;
  int64_t checkpoint_every = -1;
  std::string checkpoint_dir;
  int64_t checkpoint_keep = -1;
  int64_t log_every = -1;
  std::string save, metrics;
};

// The run a fresh launch of this program with these flags trains.
checkpoint_run run_settings_of(const program& p, const run_flags& f);

// The global batch in sequences a step: world x micro_batch x micro_batches.
int64_t run_settings_global_batch(int64_t world, const checkpoint_run& r);

struct run_resumed {
  checkpoint_run run;                 // the recorded run, with the flags given over it
  std::vector<std::string> taken;     // recorded values a fresh launch would not have, as flags
  std::vector<std::string> warnings;  // one per flag that changes the run, with its effect
  // The global batch differs from the recorded one and the change was not
  // allowed: why, with the fsdpgen command that builds a binary keeping it
  // ("" when it is kept or allowed; a kept one with allow is no warning).
  std::string batch_problem;
};

// Resuming the run `recorded` (written by `recorded_world` ranks, at
// `step`) with this program, whose binary is `binary`, and these flags.
run_resumed run_settings_resume(const program& p, const run_flags& f,
                                const checkpoint_run& recorded, int64_t recorded_world,
                                int64_t step, bool allow_batch_change, const std::string& binary);

// The command that continues a stopped run from the checkpoints in
// `checkpoint_dir`, needing nothing else, started as this run was: by
// `launcher` ("mpirun", "srun" or "single process") for `world` ranks, or
// alone when the binary re-launched itself (`relaunched`).
std::string run_settings_resume_command(const std::string& launcher, bool relaunched, int64_t world,
                                        const std::string& binary,
                                        const std::string& checkpoint_dir);
