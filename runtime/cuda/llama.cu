// llama (CUDA): the layers of llama.h, straight-line per layer as in
// runtime/cpu/llama.cpp, on the CUDA kernels, cuda_gemm and the flash kernels.
#include "runtime/cuda/llama.h"

#include <cstddef>
#include <type_traits>

#include "runtime/cuda/attention.h"
#include "runtime/cuda/cudnn_attention.h"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/kernels.cuh"
#include "runtime/dtype_pairs.h"

namespace {

// out (N, OC) = inp (N, IC) @ w^T for w (OC, IC) (nn.Linear), plus residual
// when given, plus bias (OC) when given (cuBLASLt's bias epilogue).
template <class T>
void linear_forward(T* out, const T* inp, const T* w, const T* residual, int64_t N, int64_t IC,
                    int64_t OC, gpu_exec& g, const T* bias = nullptr) {
  cuda_gemm_extras<T> e;
  e.c_in = residual;
  e.bias = bias;
  cuda_gemm(false, true, N, OC, IC, 1.0f, inp, IC, w, IC, residual ? 1.0f : 0.0f, out, OC, g, e);
}

// dinp (N, IC) = dout @ w (added to dinp with accumulate); dw (OC, IC) += dout^T @ inp;
// dbias (OC) += column sums of dout when given.
template <class T, class G>
void linear_backward(T* dinp, G* dw, const T* dout, const T* inp, const T* w, int64_t N, int64_t IC,
                     int64_t OC, bool accumulate, gpu_exec& g, G* dbias = nullptr) {
  if (dbias) cuda_gemm_bias_backward(dbias, dout, N, OC, nullptr, 0, g.stream);
  cuda_gemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC, g);
  cuda_gemm(false, false, N, IC, OC, 1.0f, dout, OC, w, IC, accumulate ? 1.0f : 0.0f, dinp, IC, g);
}

// Grouped-query attention through cuDNN when the backend set up g.attention
// (16-bit, runtime/cuda/cudnn_attention.h's choice, never with a soft-cap),
// else on the flash kernels; both with the layer's window and scale.
template <class T>
void gqa_forward(const llama_block_saved<T>& s, const llama_dims& d, gpu_exec& g) {
  const T *q = s.q, *k = s.k, *v = s.v;
  const attention_options o{d.window, d.attn_scale, d.attn_softcap};
  if constexpr (!std::is_same_v<T, float>)
    if (g.attention)
      return cuda_cudnn_attention_gqa_forward(s.attn, s.lse, q, k, v, d.B, d.T, d.H, d.KV_heads,
                                              d.D(), g, o);
  cuda_attention_gqa_forward(s.attn, s.lse, q, k, v, d.B, d.T, d.H, d.KV_heads, d.D(), g, o);
}

template <class T>
void gqa_backward(T* dq, T* dk, T* dv, float* delta, const T* dout, const llama_block_saved<T>& s,
                  const llama_dims& d, gpu_exec& g) {
  const T *q = s.q, *k = s.k, *v = s.v, *out = s.attn;
  const float* lse = s.lse;
  const attention_options o{d.window, d.attn_scale, d.attn_softcap};
  if constexpr (!std::is_same_v<T, float>)
    if (g.attention)
      return cuda_cudnn_attention_gqa_backward(dq, dk, dv, dout, q, k, v, out, lse, d.B, d.T, d.H,
                                               d.KV_heads, d.D(), g, o);
  cuda_attention_gqa_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, d.B, d.T, d.H, d.KV_heads,
                              d.D(), g, o);
}

// scratch.big as fp32 scratch for the norms' and embedding's partial sums
// (free where they run): its N * 3F values of T at least, from a 16-byte boundary.
struct fp32_scratch {
  float* data;
  int64_t floats;
};
template <class T>
fp32_scratch big_as_fp32(const llama_backward_scratch<T>& s, const llama_dims& d) {
  const auto at = reinterpret_cast<uintptr_t>(s.big);
  const int64_t pad_bytes = static_cast<int64_t>((16 - at % 16) % 16);
  const int64_t bytes = d.N() * 3 * d.F * static_cast<int64_t>(sizeof(T)) - pad_bytes;
  return {reinterpret_cast<float*>(reinterpret_cast<std::byte*>(s.big) + pad_bytes), bytes / 4};
}

}  // namespace

template <class T>
void llama_embed_forward(T* out, const int32_t* tokens, const T* wte, const llama_dims& d,
                         gpu_exec& g) {
  encoder_forward(out, tokens, wte, static_cast<const T*>(nullptr), d.B, d.T, d.C, g.stream);
}

template <class T, class G>
void llama_embed_backward(G* dwte, const int32_t* tokens, const llama_backward_scratch<T>& s,
                          const llama_dims& d, gpu_exec& g) {
  const fp32_scratch f = big_as_fp32(s, d);
  encoder_backward(dwte, static_cast<G*>(nullptr), s.dres, tokens, d.B, d.T, d.C, f.data,
                   f.floats * 4, g.stream);
}

template <class T>
void llama_block_forward(T* out, const llama_block_params<T>& p, const llama_block_saved<T>& s,
                         const llama_rope& rope, const llama_dims& d, gpu_exec& g,
                         block_pieces pieces) {
  const int64_t N = d.N(), C = d.C, F = d.F, KV = d.KV();
  const T* none = nullptr;
  if (pieces.has(kLlamaRms1))
    rmsnorm_forward(s.rms1, s.rms1_rstd, s.input, p.rms1_w, N, C, d.norm_eps, g.stream);
  if (pieces.has(kLlamaQ)) {
    linear_forward(s.q, static_cast<const T*>(s.rms1), p.q_w, none, N, C, C, g, p.q_b);
    rope_forward(s.q, rope.cos, rope.sin, N, d.T, d.H, d.D(), g.stream);
  }
  if (pieces.has(kLlamaK)) {
    linear_forward(s.k, static_cast<const T*>(s.rms1), p.k_w, none, N, C, KV, g, p.k_b);
    rope_forward(s.k, rope.cos, rope.sin, N, d.T, d.KV_heads, d.D(), g.stream);
  }
  if (pieces.has(kLlamaV)) {
    linear_forward(s.v, static_cast<const T*>(s.rms1), p.v_w, none, N, C, KV, g, p.v_b);
    gqa_forward(s, d, g);
  }
  if (pieces.has(kLlamaO))
    linear_forward(s.res2, static_cast<const T*>(s.attn), p.o_w, static_cast<const T*>(s.input), N,
                   C, C, g);
  if (pieces.has(kLlamaRms2))
    rmsnorm_forward(s.rms2, s.rms2_rstd, s.res2, p.rms2_w, N, C, d.norm_eps, g.stream);
  if (pieces.has(kLlamaGate))
    linear_forward(s.gate, static_cast<const T*>(s.rms2), p.gate_w, none, N, C, F, g);
  if (pieces.has(kLlamaUp)) {
    linear_forward(s.up, static_cast<const T*>(s.rms2), p.up_w, none, N, C, F, g);
    swiglu_forward(s.swiglu, s.gate, s.up, N * F, g.stream);
  }
  // recompute: the saved activations are all it needs
  if (out == nullptr || !pieces.has(kLlamaDown)) return;
  linear_forward(out, static_cast<const T*>(s.swiglu), p.down_w, static_cast<const T*>(s.res2), N,
                 F, C, g);
}

template <class T, class G>
void llama_block_backward(const llama_block_grads<G>& grads, const llama_block_params<T>& p,
                          const llama_block_saved<T>& s, const llama_backward_scratch<T>& scratch,
                          const llama_rope& rope, const llama_dims& d, gpu_exec& g,
                          block_pieces pieces) {
  const int64_t N = d.N(), C = d.C, F = d.F, KV = d.KV();
  T* dres = scratch.dres;    // (N, C) d(out) -> d(res2) -> d(input)
  T* dtmp = scratch.dtmp;    // (N, C)
  T* dswiglu = scratch.big;  // (N, F) each
  T* dgate = dswiglu + N * F;
  T* dup = dgate + N * F;
  // The norms' fp32 scratch is big, once its gradients have been read.
  const fp32_scratch f = big_as_fp32(scratch, d);
  if (pieces.has(kLlamaDown))
    linear_backward(dswiglu, grads.down_w, static_cast<const T*>(dres), s.swiglu, p.down_w, N, F, C,
                    false, g);
  if (pieces.has(kLlamaUp)) {
    swiglu_backward(dgate, dup, static_cast<const T*>(dswiglu), static_cast<const T*>(s.gate),
                    static_cast<const T*>(s.up), N * F, g.stream);
    linear_backward(dtmp, grads.up_w, static_cast<const T*>(dup), s.rms2, p.up_w, N, C, F, false,
                    g);
  }
  if (pieces.has(kLlamaGate))
    linear_backward(dtmp, grads.gate_w, static_cast<const T*>(dgate), s.rms2, p.gate_w, N, C, F,
                    true, g);
  // dswiglu, dgate and dup are read by now.
  if (pieces.has(kLlamaRms2))
    rmsnorm_backward(dres, grads.rms2_w, static_cast<const T*>(dtmp), static_cast<const T*>(s.res2),
                     p.rms2_w, s.rms2_rstd, N, C, true, f.data, f.floats, g.stream);
  if (pieces.has(kLlamaO))
    linear_backward(dtmp, grads.o_w, static_cast<const T*>(dres), s.attn, p.o_w, N, C, C, false, g);
  T* dq = scratch.big;  // (N, C), then (N, KV) twice
  T* dk = dq + N * C;
  T* dv = dk + N * KV;
  if (pieces.has(kLlamaV)) {
    gqa_backward(dq, dk, dv, scratch.delta, static_cast<const T*>(dtmp), s, d, g);
    rope_backward(dq, rope.cos, rope.sin, N, d.T, d.H, d.D(), g.stream);
    rope_backward(dk, rope.cos, rope.sin, N, d.T, d.KV_heads, d.D(), g.stream);
    linear_backward(dtmp, grads.v_w, static_cast<const T*>(dv), s.rms1, p.v_w, N, C, KV, false, g,
                    grads.v_b);
  }
  if (pieces.has(kLlamaK))
    linear_backward(dtmp, grads.k_w, static_cast<const T*>(dk), s.rms1, p.k_w, N, C, KV, true, g,
                    grads.k_b);
  if (pieces.has(kLlamaQ))
    linear_backward(dtmp, grads.q_w, static_cast<const T*>(dq), s.rms1, p.q_w, N, C, C, true, g,
                    grads.q_b);
  // d(q), d(k), d(v) are read by now.
  if (pieces.has(kLlamaRms1))
    rmsnorm_backward(dres, grads.rms1_w, static_cast<const T*>(dtmp),
                     static_cast<const T*>(s.input), p.rms1_w, s.rms1_rstd, N, C, true, f.data,
                     f.floats, g.stream);
}

template <class T>
void llama_head_forward(T* logits, float* losses, const int32_t* targets, const T* norm_w,
                        const T* head_w, const llama_final_norm_saved<T>& s, const llama_dims& d,
                        const float* dloss_scale, gpu_exec& g) {
  const int64_t N = d.N(), C = d.C, Vp = d.Vp();
  rmsnorm_forward(s.output, s.rstd, s.input, norm_w, N, C, d.norm_eps, g.stream);
  cuda_gemm(false, true, N, Vp, C, 1.0f, static_cast<const T*>(s.output), C, head_w, C, 0.0f,
            logits, Vp, g);
  cross_entropy_fused(logits, losses, targets, N, d.V, Vp, dloss_scale, d.logit_softcap, g.stream);
}

template <class T, class G>
void llama_head_backward(G* dnorm_w, G* dhead_w, const T* norm_w, const T* head_w, const T* logits,
                         const llama_final_norm_saved<T>& s,
                         const llama_backward_scratch<T>& scratch, const llama_dims& d,
                         gpu_exec& g) {
  const int64_t N = d.N(), C = d.C, Vp = d.Vp();
  cuda_gemm(false, false, N, C, Vp, 1.0f, logits, Vp, head_w, C, 0.0f, scratch.dtmp, C, g);
  cuda_gemm(true, false, Vp, C, N, 1.0f, logits, Vp, static_cast<const T*>(s.output), C, 1.0f,
            dhead_w, C, g);
  const fp32_scratch f = big_as_fp32(scratch, d);  // big is unused by the head
  rmsnorm_backward(scratch.dres, dnorm_w, static_cast<const T*>(scratch.dtmp),
                   static_cast<const T*>(s.input), norm_w, s.rstd, N, C, false, f.data, f.floats,
                   g.stream);
}

#define CUDA_LLAMA_INSTANTIATE_T(T)                                                        \
  template void llama_embed_forward<T>(T*, const int32_t*, const T*, const llama_dims&,    \
                                       gpu_exec&);                                         \
  template void llama_block_forward<T>(T*, const llama_block_params<T>&,                   \
                                       const llama_block_saved<T>&, const llama_rope&,     \
                                       const llama_dims&, gpu_exec&, block_pieces);        \
  template void llama_head_forward<T>(T*, float*, const int32_t*, const T*, const T*,      \
                                      const llama_final_norm_saved<T>&, const llama_dims&, \
                                      const float*, gpu_exec&);

#define CUDA_LLAMA_INSTANTIATE_TG(T, G)                                                          \
  template void llama_embed_backward<T, G>(G*, const int32_t*, const llama_backward_scratch<T>&, \
                                           const llama_dims&, gpu_exec&);                        \
  template void llama_block_backward<T, G>(                                                      \
      const llama_block_grads<G>&, const llama_block_params<T>&, const llama_block_saved<T>&,    \
      const llama_backward_scratch<T>&, const llama_rope&, const llama_dims&, gpu_exec&,         \
      block_pieces);                                                                             \
  template void llama_head_backward<T, G>(                                                       \
      G*, G*, const T*, const T*, const T*, const llama_final_norm_saved<T>&,                    \
      const llama_backward_scratch<T>&, const llama_dims&, gpu_exec&);

FSDPGEN_FOR_EACH_DTYPE(CUDA_LLAMA_INSTANTIATE_T)
FSDPGEN_FOR_EACH_DTYPE_PAIR(CUDA_LLAMA_INSTANTIATE_TG)
