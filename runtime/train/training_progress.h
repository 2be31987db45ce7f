// training_progress: where a run stands: the step it started from, its seed,
// where its weights came from, the fp16 loss scaler and the loss-spike guard
// carried from step to step, and whether (and why) it stops early.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/train/guard.h"
#include "runtime/train/loss_scale.h"

struct training_progress {
  int64_t start_step = 0;    // steps done before this run (a resumed checkpoint's)
  int64_t seed = 0;          // the run's (a resumed run's: its checkpoint's)
  std::string weights_from;  // the banner's: the init, --init-from's file or the checkpoint
  loss_scaler scaler;
  spike_guard guard;
  bool stop = false;  // stop after this step: a stop signal, or the guard
  // The stop signals the ranks agreed had come (stop_signal_agreed), for the
  // stop message; "" when none had.
  std::string stop_signal;
  // Why the run stops early (stop), for its last line and exit status:
  // empty for a signal, else the guard's reason (kGuardExitCode).
  std::string guard_stop;

  // The exit status of a run that ended: 0, or kGuardExitCode when the
  // loss-spike guard stopped it.
  int exit_status() const { return guard_stop.empty() ? 0 : kGuardExitCode; }
};
