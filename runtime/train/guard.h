// guard: the loss-spike guard. Large runs die of loss spikes (one bad batch,
// an overflow of the activations); a step whose mean loss or gradient norm
// lies far above the last steps' is better left out than applied. The guard
// keeps the loss and the norm of the last `window` applied steps; before each
// step the loop turns them into limits (mean + z standard deviations), and
// the optimizer's gate in the step (optimizer_skips, runtime/optimizer_math.h)
// leaves the step out when the norm, or the loss summed over every rank by
// the schedule's guard all-reduce, passes its limit: weights and optimizer
// state unchanged, as an fp16 overflow's skip. No decision is taken on the
// host in the step: the limits are inputs, as the learning rate is.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "runtime/program.h"

// A run the guard stopped exits with this status (0: done, 1: an error, 2:
// the flags or the launch are wrong, 3: stalled, runtime/train/watchdog.h).
inline constexpr int kGuardExitCode = 4;
// --inject-spike's factor on a step's losses and loss gradient: its loss and norm are
// that many times a normal step's, far past any z a spec gives.
inline constexpr double kInjectedSpikeFactor = 1000;

// A window whose standard deviation is below this fraction of its mean
// counts it as this (a flat window does not trip on rounding noise).
inline constexpr double kGuardMinRelativeStd = 1e-3;

struct spike_guard {
  program_guard g;             // z 0: that check off
  std::vector<double> losses;  // ring of the last g.window applied steps' mean losses
  std::vector<double> norms;   // ...and their global gradient norms
  int64_t recorded = 0;        // applied steps recorded (the ring holds min(recorded, window))
  int64_t skips_in_row = 0;    // spikes since the last applied step
};

struct guard_limits {
  double loss = std::numeric_limits<double>::infinity();  // mean loss per token
  double norm = std::numeric_limits<double>::infinity();
};

spike_guard guard_start(const program_guard& g);
bool guard_enabled(const spike_guard& s);
// The next step's limits: +inf for a check that is off or while the window
// is not yet full.
guard_limits guard_limits_of(const spike_guard& s);
// After a step: an applied one joins the window (and ends a run of spikes);
// a spike counts one more in a row. Returns whether max_skips spikes came in a
// row (the run must stop).
bool guard_after_step(spike_guard& s, bool applied, bool spike, double loss, double norm);

// The window as a checkpoint keeps it (oldest first), and back: a resumed
// run's guard continues from the same steps.
std::vector<double> guard_window_losses(const spike_guard& s);
std::vector<double> guard_window_norms(const spike_guard& s);
void guard_restore(spike_guard& s, const std::vector<double>& losses,
                   const std::vector<double>& norms, int64_t skips_in_row);
