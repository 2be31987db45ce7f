// layers: a family's layer passes timed as a generated step runs them, on
// buffers sized by the runtime's own layouts (gpt2: runtime/cpu/gpt2.h).
#pragma once

#include <string>

#include "runtime/calibrate/measure.h"
#include "runtime/cpu/gpt2.h"
#include "runtime/profile/profile.h"

// Why this machine's runtime cannot run entry `l` (an unknown family, a
// missing or unknown dimension, a dtype pair the CPU runtime has no kernels
// for), or "" when it can.
std::string layer_problem(const fsdpgen::profile::LayerTime& l);

// Times `l` (layer_problem(l) must be ""): a forward pass runs before any
// backward so that the saved activations are real; a backward accumulates
// into its gradients.
measurement measure_layer(const fsdpgen::profile::LayerTime& l, const measure_options& o);

// The kernel's shape of a gpt2 entry (layer_problem(l) must be "").
gpt2_dims layer_dims(const fsdpgen::profile::LayerTime& l);
// Elements of one block's parameters as runtime/model/gpt2.h lays them out.
int64_t gpt2_block_param_elems(const gpt2_dims& d);
