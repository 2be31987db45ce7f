// gpt2: the family's tensors as both backends see them: the dimensions, a
// block's pieces, and the pointers into the saved-activation, parameter and
// scratch layouts of runtime/model/gpt2.h, which the planner totals (the
// contract that makes measured memory equal planned memory). The layers over
// them are runtime/cpu/gpt2.h's and runtime/cuda/gpt2.h's. Each saved array
// spans the N tokens (probs and lse over (B, H) then positions). The planner
// reserves 2F in the backward scratch's big; the block's backward uses F of it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/block_pieces.h"

struct gpt2_dims {
  int64_t B = 0;  // sequences in the micro-batch
  int64_t T = 0;  // context
  int64_t C = 0;  // width
  int64_t H = 0;  // heads
  int64_t F = 0;  // MLP hidden
  int64_t V = 0;  // vocab
  // Attention without T x T storage: it saves the log-sum-exp of each query's
  // scores and backward recomputes the probabilities (codegen/planner/Activations.h's
  // flash layout, which the plan chooses); otherwise it saves the probabilities.
  bool flash = false;
  // Padded vocab (ModelSpec::padded_vocab(); 0: V, none): rows of the stored
  // embedding and head, columns of a logits row. Rows [V, Vp) are zero.
  int64_t V_padded = 0;
  int64_t N() const { return B * T; }
  int64_t Vp() const { return V_padded > V ? V_padded : V; }
};

// Bytes of one block's saved slot, of the final norm's and of the backward
// scratch, for element size a (runtime/model/gpt2.h's tables).
int64_t gpt2_block_saved_bytes(const gpt2_dims& d, int64_t a);
int64_t gpt2_final_norm_saved_bytes(const gpt2_dims& d, int64_t a);
int64_t gpt2_backward_scratch_bytes(const gpt2_dims& d, int64_t a);

// A block's pieces, in the order of runtime/model/gpt2.h's kGpt2BlockPieces:
// ln_1, attn.c_attn (with the attention), attn.c_proj (with the residual),
// ln_2, mlp.c_fc (with GELU), mlp.c_proj (with the residual).
enum gpt2_piece : int { kGpt2Ln1, kGpt2Qkv, kGpt2Proj, kGpt2Ln2, kGpt2Fc, kGpt2Fc2, kGpt2Pieces };

template <class T>
struct gpt2_block_params {
  const T* ln1_w;   // (C)
  const T* ln1_b;   // (C)
  const T* qkv_w;   // (C, 3C)
  const T* qkv_b;   // (3C)
  const T* proj_w;  // (C, C)
  const T* proj_b;  // (C)
  const T* ln2_w;   // (C)
  const T* ln2_b;   // (C)
  const T* fc_w;    // (C, F)
  const T* fc_b;    // (F)
  const T* fc2_w;   // (F, C)
  const T* fc2_b;   // (C)
};
// The block's tensors from its first tensor, as runtime/model/gpt2.h lays them out.
template <class T>
gpt2_block_params<T> gpt2_block_params_at(const T* base, const gpt2_dims& d);

template <class G>
struct gpt2_block_grads {
  G *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b, *fc2_w, *fc2_b;
};
template <class G>
gpt2_block_grads<G> gpt2_block_grads_at(G* base, const gpt2_dims& d);

template <class T>
struct gpt2_block_saved {
  float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;  // (N)

  T* input;  // (N, C)
  T* ln1;    // (N, C)
  T* qkv;    // (N, 3C)
  T* attn;   // (N, C)
  T* res2;   // (N, C)
  T* ln2;    // (N, C)
  T* fc;     // (N, F)
  T* gelu;   // (N, F)
  T* probs;  // (B, H, T, T) softmax probabilities; null with dims.flash
  // (B, H, T) log-sum-exp of each query's scaled scores; dims.flash only, else null.
  float* lse;
};
template <class T>
gpt2_block_saved<T> gpt2_block_saved_at(std::byte* slot, const gpt2_dims& d);

template <class T>
struct gpt2_final_norm_saved {
  float *mean, *rstd;  // (N)
  T* input;            // (N, C)
  T* output;           // (N, C)
};
template <class T>
gpt2_final_norm_saved<T> gpt2_final_norm_saved_at(std::byte* slot, const gpt2_dims& d);

template <class T>
struct gpt2_backward_scratch {
  T* dres;  // (N, C) gradient of the residual stream, updated in place layer by layer
  T* dtmp;  // (N, C)
  T* big;   // (N, max(3C + H*T, 2F)), with dims.flash (N, max(3C, 2F))
  // (B, H, T) dims.flash only (else null): rowsum(d(attn) * attn) per head and query.
  float* delta;
};
template <class T>
gpt2_backward_scratch<T> gpt2_backward_scratch_at(std::byte* base, const gpt2_dims& d);
