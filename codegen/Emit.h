// Emit: a planned step -> the C++ source of a training program for the CPU
// runtime (runtime/). templates/train.cpp is filled with the schedule
// written out: one function per op calling the runtime's kernels and
// collectives with arena offsets and sizes as constants, and the tables
// (buffers, units, tensors, ops with their dependencies) the runtime's
// executor walks. Deterministic: the same spec gives the same bytes.
#pragma once

#include <stdexcept>
#include <string>

#include "codegen/Memory.h"
#include "codegen/Schedule.h"

namespace fsdpgen {

// A spec the backend cannot build (e.g. llama, fp16 on CPU): a user error.
struct EmitError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Precondition: `memory` was planned from `schedule`, which verify_plan accepts.
// spec_path is how the header and the binary name the spec.
std::string emit_program(const std::string& spec_path, const Schedule& schedule,
                         const MemoryPlan& memory);

// What `fsdpgen schedule --gpu cpu` prints, embedded in the binary for --print-schedule.
std::string schedule_text(const Schedule& schedule);

}  // namespace fsdpgen
