// kernels: the gpt2 family's layers on CPU, forward and backward, each one
// function, multithreaded with OpenMP; products go through gemm() (OpenBLAS),
// never inside an OpenMP region; nothing allocates. They compute what Hugging
// Face's GPT-2 computes: tanh-approximated GELU, LayerNorm with eps 1e-5,
// causal attention scaled by 1/sqrt(head dim), Conv1D weights stored (in,
// out), the LM head reading a (V, C) matrix (the token embedding when tied).
// T is the storage type of params and activations (float, bf16 or fp16), G that
// of parameter gradients (float or the same 16-bit type); all arithmetic is fp32. These are the
// reference the CUDA kernels are tested against.
//
// Shapes: B sequences of T tokens, N = B*T rows, C channels, H heads, V vocab
// (Vp: the padded vocabulary, rows of the stored embedding and head).
// Backward functions accumulate (+=) into parameter gradients and overwrite
// input gradients unless a flag says otherwise.
#pragma once

#include <cstdint>

#include "runtime/attention_options.h"
#include "runtime/cpu/gemm.h"
#include "runtime/dtype.h"
#include "runtime/kernel_math.h"

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; without wpe (null: llama's
// rotary positions live in attention) out[b,t,:] = wte[tokens[b,t],:].
template <class T>
void encoder_forward(T* out,                 // (N, C)
                     const int32_t* tokens,  // (N)
                     const T* wte,           // (V, C)
                     const T* wpe,           // (T, C) or null
                     int64_t B, int64_t T_, int64_t C);
// dwte[tokens[n]] += dout[n] in position order, without scratch (a bf16 dwte
// is rounded once per occurrence of a token); dwpe[t] += sum over b of
// dout[b, t] (dwpe null: none). Results do not depend on the thread count.
template <class T, class G>
void encoder_backward(G* dwte,                // (V, C) +=
                      G* dwpe,                // (T, C) +=
                      const T* dout,          // (N, C)
                      const int32_t* tokens,  // (N)
                      int64_t B, int64_t T_, int64_t C);

// out = (inp - mean) * rstd * weight + bias, per row; mean and rstd saved (fp32).
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd,  // (N, C), (N), (N)
                       const T* inp, const T* weight, const T* bias, int64_t N, int64_t C);
// dinp = (accumulate ? dinp : 0) + d/dinp; dweight, dbias +=. dinp must not alias dout.
template <class T, class G>
void layernorm_backward(T* dinp, G* dweight, G* dbias,  // (N, C), (C), (C)
                        const T* dout, const T* inp, const T* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C, bool accumulate);

// Conv1D: out = inp @ weight + bias, weight (IC, OC); bias may be null.
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias,  // (N,OC) (N,IC) (IC,OC)
                    int64_t N, int64_t IC, int64_t OC, const gemm_workspace& ws);
// dinp = dout @ weight^T (skipped when dinp is null); dweight += inp^T @ dout;
// dbias += column sums of dout (skipped when null).
template <class T, class G>
void matmul_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t IC, int64_t OC, const gemm_workspace& ws);

// LM head: logits = x @ w^T, w (V, C); gpt2.h passes the padded vocabulary Vp as V.
template <class T>
void lm_head_forward(T* logits, const T* x, const T* w,  // (N,V) (N,C) (V,C)
                     int64_t N, int64_t C, int64_t V, const gemm_workspace& ws);
// dx = dlogits @ w (overwritten); dw += dlogits^T @ x.
template <class T, class G>
void lm_head_backward(T* dx, G* dw, const T* dlogits, const T* x, const T* w, int64_t N, int64_t C,
                      int64_t V, const gemm_workspace& ws);

// Causal self-attention. qkv (N, 3C) holds q | k | v, each split into H heads
// of C/H. probs (B, H, T, T) are the softmax probabilities (row t has zeros
// after column t); out (N, C) is the heads' outputs concatenated. Per head,
// GEMMs (ws for bf16 operands) compute the scores into probs (stored as T)
// and P v; the softmax runs on them in place in fp32.
template <class T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t B, int64_t T_, int64_t C, int64_t H,
                       const gemm_workspace& ws);
// dqkv (N, 3C) overwritten; dprobs (B, H, T, T) is scratch (it ends holding
// the scaled scores' gradient, stored as T).
template <class T>
void attention_backward(T* dqkv, T* dprobs, const T* dout, const T* qkv, const T* probs, int64_t B,
                        int64_t T_, int64_t C, int64_t H, const gemm_workspace& ws);

// Causal self-attention with flash semantics: the same out, and instead of
// the probabilities lse (B, H, T), fp32, the log-sum-exp of each query's
// scaled scores, so that P[t, u] = exp(scale q_t . k_u - lse[t]). Nothing of
// size T x T is stored: each query's scores are recomputed as needed, in
// fp32 (not rounded to T as the materialized scores are). Head size C/H at
// most kAttentionFlashMaxHeadSize (std::invalid_argument otherwise).
inline constexpr int64_t kAttentionFlashMaxHeadSize = 256;
template <class T>
void attention_forward_flash(T* out,        // (N, C)
                             float* lse,    // (B, H, T)
                             const T* qkv,  // (N, 3C)
                             int64_t B, int64_t T_, int64_t C, int64_t H);
// dqkv (N, 3C) overwritten, from dout and the forward's out and lse, with
// P recomputed from q, k and lse. delta (B, H, T) is fp32 scratch; it ends
// holding rowsum(dout * out) per head and query.
template <class T>
void attention_backward_flash(T* dqkv,           // (N, 3C)
                              float* delta,      // (B, H, T)
                              const T* dout,     // (N, C)
                              const T* qkv,      // (N, 3C)
                              const T* out,      // (N, C)
                              const float* lse,  // (B, H, T)
                              int64_t B, int64_t T_, int64_t C, int64_t H);
// Grouped-query attention (llama) in the same flash form, with q, k and v
// arrays of their own: H query heads of size hs, KV_heads key/value heads
// (dividing H), query head h reading kv head h / (H / KV_heads); k and v
// are not repeated. H == KV_heads is multi-head attention. The options (a
// sliding window, the scale, a soft-cap: runtime/attention_options.h) are
// shared with the CUDA twins.
template <class T>
void attention_gqa_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B,
                           int64_t T_, int64_t H, int64_t KV_heads, int64_t hs,
                           const attention_options& o);
template <class T>
void attention_gqa_backward(T* dq, T* dk, T* dv, float* delta, const T* dout, const T* q,
                            const T* k, const T* v, const T* out, const float* lse, int64_t B,
                            int64_t T_, int64_t H, int64_t KV_heads, int64_t hs,
                            const attention_options& o);
// The same with a window only.
template <class T>
void attention_gqa_forward(T* out,      // (N, H*hs)
                           float* lse,  // (B, H, T)
                           const T* q,  // (N, H*hs)
                           const T* k,  // (N, KV_heads*hs)
                           const T* v,  // (N, KV_heads*hs)
                           int64_t B, int64_t T_, int64_t H, int64_t KV_heads, int64_t hs,
                           int64_t window = 0);
// dq, dk, dv overwritten (dk, dv summed over the query heads sharing a kv
// head); delta (B, H, T) fp32 scratch as in attention_backward_flash.
template <class T>
void attention_gqa_backward(T* dq, T* dk, T* dv,  // (N, H*hs), (N, KV_heads*hs) twice
                            float* delta,         // (B, H, T)
                            const T* dout,        // (N, H*hs)
                            const T* q, const T* k, const T* v, const T* out,
                            const float* lse,  // (B, H, T)
                            int64_t B, int64_t T_, int64_t H, int64_t KV_heads, int64_t hs,
                            int64_t window = 0);

// RMSNorm (llama): out = inp * rstd * (weight_offset + weight) per row, rstd
// = 1 / sqrt(mean(inp^2) + eps) saved (fp32), no mean taken out and no bias.
// weight_offset is 0, or 1 for Gemma's RMSNorm, whose weights start at 0.
// out == nullptr: rstd only.
template <class T>
void rmsnorm_forward(T* out, float* rstd,            // (N, C), (N)
                     const T* inp, const T* weight,  // (N, C), (C)
                     int64_t N, int64_t C, float eps, float weight_offset = 0.0f);
// dinp = (accumulate ? dinp : 0) + d/dinp; dweight +=. dinp must not alias dout.
template <class T, class G>
void rmsnorm_backward(T* dinp, G* dweight,          // (N, C), (C)
                      const T* dout, const T* inp,  // (N, C), (N, C)
                      const T* weight,              // (C)
                      const float* rstd,            // (N)
                      int64_t N, int64_t C, bool accumulate, float weight_offset = 0.0f);

// SwiGLU (llama's MLP), elementwise over n values: out = silu(gate) * up.
// gate and up are the outputs of two GEMMs (separate arrays, as the layout
// saves them).
template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n);
// dgate, dup from dout (dout may be neither).
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);

// GeGLU (Gemma's MLP), as SwiGLU with GELU's tanh form for SiLU:
// out = gelu(gate) * up.
template <class T>
void geglu_forward(T* out, const T* gate, const T* up, int64_t n);
template <class T>
void geglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);

// GELU, tanh approximation. gelu_backward may run in place (dinp == dout).
template <class T>
void gelu_forward(T* out, const T* inp, int64_t n);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);

// out = a + b (out may alias a or b).
template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n);

// Softmax cross-entropy fused with its gradient over the V true columns of
// rows Vp >= V wide (the padded vocabulary): losses[i] = -log
// softmax(logits[i][0, V))[targets[i]] (fp32); logits[i][0, V) are
// overwritten by dloss_scale * (softmax - onehot(target)) and the padded
// columns [V, Vp) by zero, whatever they held: they take no part in the max,
// the sum or the loss, and their gradient is zero. A softcap X > 0 (Gemma
// 2's final_logit_softcapping) first makes each logit c = X tanh(l / X) in
// place; the loss is of those and the gradient is d(l) = d(c) (1 - (c / X)^2).
template <class T>
void cross_entropy_fused(T* logits,  // (N, Vp) in: logits, out: dlogits
                         float* losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                         float dloss_scale, float softcap = 0.0f);
