// causal_attention: GPT-2's attention module (c_attn, causal softmax
// attention over materialized probabilities, c_proj) written as a custom
// layer for gpt2's attn (tests/e2e/CustomLayerTest: the model trains as the
// built-in one). The sequence length is a hyper-parameter: the rows of a
// call are tokens / context sequences of context tokens each.
#pragma once

#include <cstdint>

#include "layers/fsdpgen_layer.h"
#include "runtime/kernels.h"

template <class T, class G>
struct CausalSelfAttention {
  struct Hyper {
    int64_t d_model;
    int64_t heads;
    int64_t context;
  };
  Hyper hyper;

  fsdpgen::layer::Param<T, G, "d_model, 3 * d_model", "normal(0.02)"> qkv_w;  // (in, out)
  fsdpgen::layer::Param<T, G, "3 * d_model", "zeros"> qkv_b;
  fsdpgen::layer::Param<T, G, "d_model, d_model", "normal(0.02)"> proj_w;
  fsdpgen::layer::Param<T, G, "d_model", "zeros"> proj_b;

  fsdpgen::layer::Saved<T, "3 * d_model"> qkv;
  fsdpgen::layer::Saved<T, "d_model"> att;
  fsdpgen::layer::Saved<T, "heads * context"> probs;  // (B, H, T, T) over the call
  fsdpgen::layer::Scratch<T, "d_model"> datt;
  fsdpgen::layer::Scratch<T, "3 * d_model"> dqkv;
  fsdpgen::layer::Scratch<T, "heads * context"> dprobs;

  static constexpr fsdpgen::layer::Flops<"8 * d_model * d_model + 4 * context * d_model"> flops{};

  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const {
    const int64_t C = hyper.d_model, T_ = hyper.context, B = tokens / T_;
    matmul_forward(qkv.data, x, qkv_w.value, qkv_b.value, tokens, C, 3 * C, cpu.ws);
    attention_forward(att.data, probs.data, static_cast<const T*>(qkv.data), B, T_, C, hyper.heads,
                      cpu.ws);
    matmul_forward(y, static_cast<const T*>(att.data), proj_w.value, proj_b.value, tokens, C, C,
                   cpu.ws);
  }

  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const {
    const int64_t C = hyper.d_model, T_ = hyper.context, B = tokens / T_;
    matmul_backward(datt.data, proj_w.grad, proj_b.grad, dy, static_cast<const T*>(att.data),
                    proj_w.value, tokens, C, C, cpu.ws);
    attention_backward(dqkv.data, dprobs.data, static_cast<const T*>(datt.data),
                       static_cast<const T*>(qkv.data), static_cast<const T*>(probs.data), B, T_, C,
                       hyper.heads, cpu.ws);
    matmul_backward(dx, qkv_w.grad, qkv_b.grad, static_cast<const T*>(dqkv.data), x, qkv_w.value,
                    tokens, C, 3 * C, cpu.ws);
  }
};
