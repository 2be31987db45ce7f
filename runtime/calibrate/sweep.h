// sweep: every entry of a request measured on this machine: the compute
// sections (op overhead, layers, element-wise ops, Muon's Newton-Schulz, with
// ranks_per_node ranks of each node computing at once), then the collectives,
// then the copies, in several rounds over all of them (measure_options::rounds);
// an entry's time is the mean of its rounds' means. Rank 0 prints a line per entry.
#pragma once

#include <stdexcept>
#include <string>

#include "runtime/calibrate/measure.h"
#include "runtime/calibrate/ranks.h"
#include "runtime/calibrate/target.h"
#include "runtime/profile/profile.h"

// An error every rank knows (the same message on all of them): a request
// these ranks cannot measure, or an entry that failed on some rank.
struct calibrate_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws calibrate_error naming `file` and the first entry that cannot run
// on these ranks (before anything is measured).
void sweep_check(const fsdpgen::profile::Profile& request, const rank_layout& l,
                 const calibrate_target& t, const std::string& file);

// Fills the seconds, runs, threads_per_rank and op_overhead_s of every entry
// of `p` (checked by sweep_check); collective over the world.
void sweep_run(fsdpgen::profile::Profile& p, const rank_layout& l, calibrate_target& t,
               const std::string& file, const measure_options& o);
