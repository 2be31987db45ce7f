// gemm: the name custom layers' headers include for runtime/cpu/gemm.h, the
// CPU backend's GEMM (docs/custom-layers.md). The runtime itself includes
// runtime/cpu/gemm.h; tools/check_layers.py keeps it so.
#pragma once

#include "runtime/cpu/gemm.h"
