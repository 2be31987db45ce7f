// fsdpgen_layer.h: the API a custom layer is written against (docs/custom-layers.md).
//
// A layer is a class template over T, the plan's parameter and activation
// type (float, bf16 or fp16), and G, its gradient type. Its members say all
// the planner needs, in types that g++, nvcc and fsdpgen's reader
// (fsdpgen-layers, Clang LibTooling) all read the same way:
//
//   template <class T, class G>
//   struct GeluMlp {
//     struct Hyper {                  // bound in the spec: d_model = width
//       int64_t d_model;
//       int64_t d_ff;
//     };
//     Hyper hyper;
//     fsdpgen::layer::Param<T, G, "d_model, d_ff", "normal(0.02)", "muon(in, out)"> fc_w;
//     fsdpgen::layer::Param<T, G, "d_ff", "zeros"> fc_b;
//     fsdpgen::layer::Saved<T, "d_ff"> pre;          // kept from forward for backward
//     fsdpgen::layer::Scratch<T, "d_ff"> dpre;       // live during one backward call
//     static constexpr fsdpgen::layer::Flops<"4 * d_model * d_ff"> flops{};
//     void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
//     void backward(const T* x, const T* dy, T* dx, int64_t tokens,
//                   const fsdpgen::layer::Cpu& cpu) const;
//   };
//
// Shapes and extents are expressions over the Hyper fields: integers, the
// field names, + - * / and parentheses ("d_ff, d_model" is a matrix of d_ff
// rows of d_model, row-major; "3 * d_model" a vector). Initialisations are
// "normal(STD)", "ones" or "zeros", STD a number or a real expression over
// the Hyper fields with sqrt ("normal(0.02 / sqrt(2 * n_layer))"). Element-
// wise code for bf16 and fp16 converts with to_float(x) and from_float<T>(f)
// (runtime/dtype.h). `fsdpgen check-layer HEADER LAYER --hyper ...` checks a
// layer's bounds, writes and gradients before it trains. Flops is the forward's
// floating-point operations per token (2 per multiply-add), an expression
// too; backward is taken to cost twice as much, as for built-in layers.
//
// Ownership: the planner allocates everything. Before each call the
// generated step points every member at its place in the planned arena: a
// Param's value (the gathered parameter) and grad (its unsharded gradient,
// to which backward adds), a Saved array (tokens x extent, in the block's
// saved activations: written by forward, read by backward, rebuilt by a
// recompute), a Scratch array (tokens x extent, in the backward scratch:
// set for backward calls only, so forward keeps all it needs in Saved
// arrays). A layer allocates nothing and keeps no state between calls.
//
// Entry points, on the CPU: forward reads x (tokens, d_in) and writes y
// (tokens, d_out), overwriting it (in a block both are the model's width,
// which a hyper-parameter named d_model must then equal); backward reads x and dy (tokens, d_out),
// writes dx (tokens, d_in), overwriting it, and adds every parameter's
// gradient. Rows are tokens in sequence order. A layer may also declare
// forward_cuda and backward_cuda with the same parameters and a
// `const fsdpgen::layer::Cuda&` last (layers/fsdpgen_layer_cuda.h; defined in
// a .cu file the spec's layers section names, as `cuda = "x.cu"`; this header
// stays free of CUDA); `--target cuda` needs them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/cpu/gemm.h"

namespace fsdpgen::layer {

// A string as a template argument (C++20 class-type template parameter).
template <std::size_t N>
struct Text {
  char chars[N] = {};
  consteval Text(const char (&s)[N]) {
    for (std::size_t i = 0; i < N; ++i)
      chars[i] = s[i];
  }
};

// A parameter tensor: Shape "rows, cols" or "n", Init "normal(STD)", "ones"
// or "zeros". Optimizer says which optimizer = muon(...) gives a matrix:
// "adamw" (the default: the nested AdamW, as for every vector), or
// "muon(out, in)" (Muon; its rows are the outputs, as nn.Linear stores a
// weight) or "muon(in, out)" (Muon; its rows are the inputs, as GPT-2's
// Conv1D: x (tokens, rows) times it). Muon's learning rate reads the
// orientation; other optimizers ignore it.
template <class T, class G, Text Shape, Text Init, Text Optimizer = "adamw">
struct Param {
  const T* value = nullptr;  // the parameter, gathered
  G* grad = nullptr;         // its gradient: backward adds to it
};

// An array forward keeps for backward: (tokens, PerToken) of T, or of fp32.
template <class T, Text PerToken>
struct Saved {
  T* data = nullptr;
};
template <Text PerToken>
struct SavedF32 {
  float* data = nullptr;
};

// An array one backward call uses and drops: (tokens, PerToken) of T, or of fp32.
template <class T, Text PerToken>
struct Scratch {
  T* data = nullptr;
};
template <Text PerToken>
struct ScratchF32 {
  float* data = nullptr;
};

// The forward's floating-point operations per token.
template <Text PerToken>
struct Flops {};

// What a CPU entry point receives besides the layer's members: the GEMM
// workspace of runtime/cpu/gemm.h (runtime/cpu/kernels.h's matmuls take it).
struct Cpu {
  gemm_workspace ws;
};

// The CUDA entry points' counterpart (layers/fsdpgen_layer_cuda.h).
struct Cuda;

}  // namespace fsdpgen::layer
