// Emit: a planned step -> the C++ source of a training program for the CPU
// runtime (runtime/) or the CUDA runtime (runtime/cuda/). templates/train.cpp
// is filled with the schedule written out: one function per op calling the
// runtime's kernels and collectives with arena offsets and sizes as
// constants, and the tables (buffers, units, tensors, ops with their
// dependencies) the runtime's executor walks. Both targets get the same
// schedule in the same words: the CUDA runtime's calls are the CPU
// runtime's names with the op's stream last (runtime/cuda/step.h).
// Deterministic: the same spec gives the same bytes. The writer's rooms:
// codegen/emit/EmitContext.h (what it knows of the program, built once),
// codegen/emit/OpBodies.h (the ops), codegen/emit/CustomLayers.h, codegen/emit/Tables.h and
// codegen/emit/CppText.h.
#pragma once

#include <string>

#include "codegen/emit/EmitTarget.h"
#include "codegen/planner/Memory.h"
#include "codegen/planner/Report.h"  // schedule_text, which the program embeds
#include "codegen/planner/Schedule.h"

namespace fsdpgen {

// Precondition: `memory` was planned from `schedule`, which verify_plan accepts,
// for a spec the target's backend can build (codegen/planner/TargetSupport.h).
// spec_path is how the header and the binary name the spec.
std::string emit_program(const std::string& spec_path, const Schedule& schedule,
                         const MemoryPlan& memory, const EmitTarget& target = {});

}  // namespace fsdpgen
