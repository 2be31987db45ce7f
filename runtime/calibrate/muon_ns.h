// muon_ns: Muon's owner step on one matrix (the momentum step and the
// Newton-Schulz iterations), timed through the runtime's own
// muon_orthogonalize (runtime/cpu/muon.h), the function a training step calls.
#pragma once

#include "runtime/calibrate/buffers.h"
#include "runtime/calibrate/measure.h"
#include "runtime/cpu/muon.h"
#include "runtime/profile/profile.h"

// The settings an entry runs with: its ns_steps and ns_dtype, torch's
// defaults for the rest (they do not change the work done).
inline muon_settings muon_ns_settings(const fsdpgen::profile::MuonNsTime& e) {
  muon_settings s;
  s.ns_steps = static_cast<int>(e.ns_steps);
  s.ns_dtype = dtype_named(e.ns_dtype);
  return s;
}

measurement measure_muon_ns(const fsdpgen::profile::MuonNsTime& e, const measure_options& o);
