// EmitTarget: the runtime a generated program is written for (the CPU one,
// runtime/, or the CUDA one, runtime/cuda/) and the hardware its schedule was
// planned for. emit_program (codegen/emit/Emit.h) takes it, and so does every
// room of the emitter through EmitContext.
#pragma once

#include <string>

namespace fsdpgen {

struct EmitTarget {
  enum class Kind { Cpu, Cuda };
  Kind kind = Kind::Cpu;
  std::string hardware = "cpu";  // the --gpu name the schedule was planned for
};

}  // namespace fsdpgen
