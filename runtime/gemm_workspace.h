// gemm_workspace: the scratch a 16-bit GEMM on the CPU converts its operands
// in (runtime/cpu/gemm.h), a slice of the arena's GEMM workspace buffer. Every
// step_context carries one, and custom layers receive it (layers/fsdpgen_layer.h).
#pragma once

#include <cstdint>

struct gemm_workspace {
  float* data = nullptr;
  int64_t floats = 0;
};
