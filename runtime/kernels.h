// kernels: the name custom layers' headers include for runtime/cpu/kernels.h, the
// CPU backend's kernels (docs/custom-layers.md). The runtime itself includes
// runtime/cpu/kernels.h; tools/check_layers.py keeps it so.
#pragma once

#include "runtime/cpu/kernels.h"
