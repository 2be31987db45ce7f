// cuda_layers: the gpt2 family's layer passes on the GPU through
// runtime/cuda/gpt2.h, timed by CUDA events on the compute stream, on
// device buffers of the runtime's layout sizes (as runtime/calibrate/layers.h on a CPU).
#pragma once

#include "runtime/calibrate/measure.h"
#include "runtime/cuda/exec.h"
#include "runtime/profile/profile.h"

// `g` holds the stream, cuBLASLt handle and algorithm cache and the step
// scalars; each entry adds the GEMM workspace a plan reserves (and cuDNN's
// attention graphs where the runtime would run them).
measurement cuda_measure_layer(const fsdpgen::profile::LayerTime& l, const gpu_exec& g,
                               const measure_options& o);
