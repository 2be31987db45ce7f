// attention_options: the causal attention's options beyond the shape (a
// sliding window, the scale of q . k, a soft-cap of the scores) and the
// window's key range, one definition for the CPU kernels (runtime/cpu/) and
// their CUDA twins (runtime/cuda/attention.h, cudnn_attention.h).
#pragma once

#include <cstdint>

#include "runtime/host_device.h"

// A window W > 0 (Mistral's sliding_window) lets query t attend keys u with
// t - u < W only, as transformers' sliding-window mask does; 0 (or W >= T)
// is plain causal. Gemma 2: a scale of q . k other than 1/sqrt(hs), and a
// softcap X > 0 that makes each score s = X tanh(s / X) before the window's
// mask (its gradient through 1 - (s / X)^2, runtime/kernel_math.h's
// softcap_of and softcap_slope; lse is of the capped scores).
struct attention_options {
  int64_t window = 0;    // 0: none
  float scale = 0.0f;    // 0: 1 / sqrt(hs)
  float softcap = 0.0f;  // 0: none
};

// The first key query t attends: 0, or with a window W the last W keys' first.
FSDPGEN_HOST_DEVICE int64_t attention_first_key(int64_t t, int64_t window) {
  return window > 0 && t >= window ? t - window + 1 : 0;
}

// The last query (of T) that attends key u: T - 1, or with a window W u + W - 1.
FSDPGEN_HOST_DEVICE int64_t attention_last_query(int64_t u, int64_t window, int64_t T_) {
  return window > 0 && T_ - 1 - u >= window ? u + window - 1 : T_ - 1;
}
