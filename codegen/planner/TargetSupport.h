// TargetSupport: what a backend's kernels can build today, checked on the
// spec before planning. Planning needs none of it (a llama model's memory is
// planned before its kernels exist); emitting and building need all of it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "codegen/planner/Hardware.h"
#include "dsl/Spec.h"

namespace fsdpgen {

// "CUDA" for a GPU, else "CPU": the backend that builds for `hw`.
std::string_view backend_name(const Hardware& hw);

// Why the backend for `hw` cannot build `spec`, one reason per entry (empty:
// it can). Precondition: `spec` came from check() with the overrides applied;
// the plan's micro-batch is the spec's (schedule_options_for keeps it). With
// allow_unrun, unrun_features' reasons are left out.
std::vector<std::string> unsupported_features(const Spec& spec, const Hardware& hw,
                                              bool allow_unrun = false);

// The features among unsupported_features' reasons whose CUDA code is
// written, built in CI and compared with its CPU twin by tests that need a
// GPU, and has not run on one yet (docs/gpu.md, "Waiting for a GPU"), each
// as the spec says it ("qk_norm = true"): what build and emit's --allow-unrun
// builds anyway, with a warning each. Empty on the CPU.
std::vector<std::string> unrun_features(const Spec& spec, const Hardware& hw);

}  // namespace fsdpgen
