// run_shape: a training run's fixed facts, settled before it starts and read
// by each of its parts: the program, the flags, the run as launched or
// resumed (run_settings), the launch, and what follows from them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "runtime/files/checkpoint_files.h"
#include "runtime/launch.h"
#include "runtime/program.h"
#include "runtime/train/train_flags.h"

struct run_shape {
  // `run`: the run as launched (run_settings); `resume_from`: the checkpoint
  // --resume names ("" without --resume), `resumed` its manifest.
  run_shape(const program& p, const train_options& o, const checkpoint_run& run,
            std::string resume_from, const checkpoint_manifest& resumed, const launch_info& li)
      : p(p),
        o(o),
        run(run),
        resume_from(std::move(resume_from)),
        resumed(resumed),
        li(li),
        lead(li.rank == 0),
        steps(run.steps),
        log_every(run.log_every),
        tokens_per_step(program_global_batch(p) * p.model.context) {}

  const program& p;
  const train_options& o;
  const checkpoint_run run;
  const std::string resume_from;
  const checkpoint_manifest& resumed;  // resume_from's manifest
  const launch_info& li;
  const bool lead;  // rank 0, which prints
  const int64_t steps;
  const int64_t log_every;
  const int64_t tokens_per_step;
};
