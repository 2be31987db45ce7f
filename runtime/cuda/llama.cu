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
  const attention_options o = attention_options_of(d);
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
  const attention_options o = attention_options_of(d);
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
// The attention's delta (B, H, T) as fp32 scratch for a norm whose input
// gradient goes to big, or that runs once the attention's backward has read
// it (post_attn's and rms1's of a post-norm block, q's and k's norms): it is
// free outside the v_proj piece. Too small for a chunk, the column sums walk
// every row (rmsnorm_backward's form without scratch).
template <class T>
fp32_scratch delta_as_fp32(const llama_backward_scratch<T>& s, const llama_dims& d) {
  return {s.delta, d.B * d.H * d.T};
}

// RMSNorm over (N, C) with the model's epsilon and weight offset.
template <class T>
void norm_forward(T* out, float* rstd, const T* inp, const T* w, const llama_dims& d, gpu_exec& g) {
  rmsnorm_forward(out, rstd, inp, w, d.N(), d.C, d.norm_eps, d.norm_weight_offset(), g.stream);
}
template <class T, class G>
void norm_backward(T* dinp, G* dw, const T* dout, const T* inp, const T* w, const float* rstd,
                   bool accumulate, fp32_scratch f, const llama_dims& d, gpu_exec& g) {
  rmsnorm_backward(dinp, dw, dout, inp, w, rstd, d.N(), d.C, accumulate, d.norm_weight_offset(),
                   f.data, f.floats, g.stream);
}

// The MLP's gate over n values: act(gate) * up, SwiGLU's SiLU or (gelu_gate,
// Gemma) GeGLU's GELU, as runtime/cpu/llama.cpp's.
template <class T>
void gate_forward(T* out, const T* gate, const T* up, int64_t n, const llama_dims& d, gpu_exec& g) {
  if (d.gelu_gate)
    geglu_forward(out, gate, up, n, g.stream);
  else
    swiglu_forward(out, gate, up, n, g.stream);
}
template <class T>
void gate_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                   const llama_dims& d, gpu_exec& g) {
  if (d.gelu_gate)
    geglu_backward(dgate, dup, dout, gate, up, n, g.stream);
  else
    swiglu_backward(dgate, dup, dout, gate, up, n, g.stream);
}

// q's or k's RMSNorm (qk_norm) over `heads` heads of each of N rows: each
// head's D values a norm's row, or across heads all heads * D of them.
template <class T>
void qk_norm_forward(T* out, float* rstd, const T* inp, const T* w, int64_t heads,
                     const llama_dims& d, gpu_exec& g) {
  const int64_t width = heads * d.D(), group = d.qk_norm_across_heads ? width : d.D();
  rmsnorm_forward(out, rstd, inp, w, d.N() * (width / group), group, d.norm_eps,
                  d.norm_weight_offset(), g.stream);
}
template <class T, class G>
void qk_norm_backward(T* dinp, G* dw, const T* dout, const T* inp, const T* w, const float* rstd,
                      int64_t heads, fp32_scratch f, const llama_dims& d, gpu_exec& g) {
  const int64_t width = heads * d.D(), group = d.qk_norm_across_heads ? width : d.D();
  rmsnorm_backward(dinp, dw, dout, inp, w, rstd, d.N() * (width / group), group, false,
                   d.norm_weight_offset(), f.data, f.floats, g.stream);
}

// OLMo 2's block (post_norm, with qk_norm): res2 = input + rms1(attention(input) @ o_w^T),
// out = res2 + rms2(mlp(res2)); pieces in llama_post_piece order, as on the CPU.
template <class T>
void post_norm_block_forward(T* out, const llama_block_params<T>& p, const llama_block_saved<T>& s,
                             const llama_rope& rope, const llama_dims& d, gpu_exec& g,
                             block_pieces pieces) {
  const int64_t N = d.N(), C = d.C, F = d.F, KV = d.KV(), Q = d.Q(), D = d.D();
  const T* none = nullptr;
  const T* input = s.input;
  if (pieces.has(kLlamaPostQ)) {
    linear_forward(s.q_raw, input, p.q_w, none, N, C, Q, g);
    qk_norm_forward(s.q, s.q_rstd, static_cast<const T*>(s.q_raw), p.q_norm_w, d.H, d, g);
    rope_forward(s.q, rope.cos, rope.sin, N, d.T, d.H, D, g.stream);
  }
  if (pieces.has(kLlamaPostK)) {
    linear_forward(s.k_raw, input, p.k_w, none, N, C, KV, g);
    qk_norm_forward(s.k, s.k_rstd, static_cast<const T*>(s.k_raw), p.k_norm_w, d.KV_heads, d, g);
    rope_forward(s.k, rope.cos, rope.sin, N, d.T, d.KV_heads, D, g.stream);
  }
  if (pieces.has(kLlamaPostV)) {
    linear_forward(s.v, input, p.v_w, none, N, C, KV, g);
    gqa_forward(s, d, g);
  }
  if (pieces.has(kLlamaPostO))
    linear_forward(s.attn_out, static_cast<const T*>(s.attn), p.o_w, none, N, Q, C, g);
  if (pieces.has(kLlamaPostRms1)) {
    norm_forward(s.res2, s.rms1_rstd, static_cast<const T*>(s.attn_out), p.rms1_w, d, g);
    residual_forward(s.res2, static_cast<const T*>(s.res2), input, N * C, g.stream);
  }
  if (pieces.has(kLlamaPostGate))
    linear_forward(s.gate, static_cast<const T*>(s.res2), p.gate_w, none, N, C, F, g);
  if (pieces.has(kLlamaPostUp)) {
    linear_forward(s.up, static_cast<const T*>(s.res2), p.up_w, none, N, C, F, g);
    gate_forward(s.swiglu, static_cast<const T*>(s.gate), static_cast<const T*>(s.up), N * F, d, g);
  }
  if (pieces.has(kLlamaPostDown))
    linear_forward(s.mlp_out, static_cast<const T*>(s.swiglu), p.down_w, none, N, F, C, g);
  if (!pieces.has(kLlamaPostRms2)) return;
  // recompute (out == nullptr): the norm's statistics only
  norm_forward(out, s.rms2_rstd, static_cast<const T*>(s.mlp_out), p.rms2_w, d, g);
  if (out != nullptr)
    residual_forward(out, static_cast<const T*>(out), static_cast<const T*>(s.res2), N * C,
                     g.stream);
}

// What flows between pieces: runtime/cpu/llama.cpp's post_norm_block_backward.
template <class T, class G>
void post_norm_block_backward(const llama_block_grads<G>& grads, const llama_block_params<T>& p,
                              const llama_block_saved<T>& s,
                              const llama_backward_scratch<T>& scratch, const llama_rope& rope,
                              const llama_dims& d, gpu_exec& g, block_pieces pieces) {
  const int64_t N = d.N(), C = d.C, F = d.F, KV = d.KV(), Q = d.Q(), D = d.D();
  T* dres = scratch.dres;    // (N, C) d(out) -> d(res2) -> d(input)
  T* dtmp = scratch.dtmp;    // (N, max(C, Q))
  T* dswiglu = scratch.big;  // (N, F) each
  T* dgate = dswiglu + N * F;
  T* dup = dgate + N * F;
  const fp32_scratch delta = delta_as_fp32(scratch, d);
  if (pieces.has(kLlamaPostRms2))  // big is free: nothing flows in it yet
    norm_backward(dtmp, grads.rms2_w, static_cast<const T*>(dres), static_cast<const T*>(s.mlp_out),
                  p.rms2_w, s.rms2_rstd, false, big_as_fp32(scratch, d), d, g);
  if (pieces.has(kLlamaPostDown))
    linear_backward(dswiglu, grads.down_w, static_cast<const T*>(dtmp), s.swiglu, p.down_w, N, F, C,
                    false, g);
  if (pieces.has(kLlamaPostUp)) {
    gate_backward(dgate, dup, static_cast<const T*>(dswiglu), static_cast<const T*>(s.gate),
                  static_cast<const T*>(s.up), N * F, d, g);
    linear_backward(dres, grads.up_w, static_cast<const T*>(dup), s.res2, p.up_w, N, C, F, true, g);
  }
  if (pieces.has(kLlamaPostGate))
    linear_backward(dres, grads.gate_w, static_cast<const T*>(dgate), s.res2, p.gate_w, N, C, F,
                    true, g);
  T* dattn_out = scratch.big;  // (N, C)
  if (pieces.has(kLlamaPostRms1))
    norm_backward(dattn_out, grads.rms1_w, static_cast<const T*>(dres),
                  static_cast<const T*>(s.attn_out), p.rms1_w, s.rms1_rstd, false, delta, d, g);
  if (pieces.has(kLlamaPostO))
    linear_backward(dtmp, grads.o_w, static_cast<const T*>(dattn_out), s.attn, p.o_w, N, Q, C,
                    false, g);
  T* dq = scratch.big;  // (N, Q), (N, KV) twice, then d(q) and d(k) before their norms
  T* dk = dq + N * Q;
  T* dv = dk + N * KV;
  T* dq_raw = dv + N * KV;
  T* dk_raw = dq_raw + N * Q;
  if (pieces.has(kLlamaPostV)) {
    gqa_backward(dq, dk, dv, scratch.delta, static_cast<const T*>(dtmp), s, d, g);
    rope_backward(dq, rope.cos, rope.sin, N, d.T, d.H, D, g.stream);
    rope_backward(dk, rope.cos, rope.sin, N, d.T, d.KV_heads, D, g.stream);
    linear_backward(dres, grads.v_w, static_cast<const T*>(dv), s.input, p.v_w, N, C, KV, true, g);
  }
  if (pieces.has(kLlamaPostK)) {
    qk_norm_backward(dk_raw, grads.k_norm_w, static_cast<const T*>(dk),
                     static_cast<const T*>(s.k_raw), p.k_norm_w, s.k_rstd, d.KV_heads, delta, d, g);
    linear_backward(dres, grads.k_w, static_cast<const T*>(dk_raw), s.input, p.k_w, N, C, KV, true,
                    g);
  }
  if (pieces.has(kLlamaPostQ)) {
    qk_norm_backward(dq_raw, grads.q_norm_w, static_cast<const T*>(dq),
                     static_cast<const T*>(s.q_raw), p.q_norm_w, s.q_rstd, d.H, delta, d, g);
    linear_backward(dres, grads.q_w, static_cast<const T*>(dq_raw), s.input, p.q_w, N, C, Q, true,
                    g);
  }
}

}  // namespace

template <class T>
void llama_embed_forward(T* out, const int32_t* tokens, const T* wte, const llama_dims& d,
                         gpu_exec& g) {
  encoder_forward(out, tokens, wte, static_cast<const T*>(nullptr), d.B, d.T, d.C, g.stream);
  if (d.scale_embedding) scale_in_place(out, llama_embedding_scale<T>(d), d.N() * d.C, g.stream);
}

// With scale_embedding, d(input) is scaled in place: the embedding's is the
// step's last use of it.
template <class T, class G>
void llama_embed_backward(G* dwte, const int32_t* tokens, const llama_backward_scratch<T>& s,
                          const llama_dims& d, gpu_exec& g) {
  if (d.scale_embedding) scale_in_place(s.dres, llama_embedding_scale<T>(d), d.N() * d.C, g.stream);
  const fp32_scratch f = big_as_fp32(s, d);
  encoder_backward(dwte, static_cast<G*>(nullptr), s.dres, tokens, d.B, d.T, d.C, f.data,
                   f.floats * 4, g.stream);
}

template <class T>
void llama_block_forward(T* out, const llama_block_params<T>& p, const llama_block_saved<T>& s,
                         const llama_rope& rope, const llama_dims& d, gpu_exec& g,
                         block_pieces pieces) {
  if (d.post_norm) return post_norm_block_forward(out, p, s, rope, d, g, pieces);
  const int64_t N = d.N(), C = d.C, F = d.F, KV = d.KV(), Q = d.Q(), D = d.D();
  const T* none = nullptr;
  const T* rms1 = s.rms1;
  if (pieces.has(kLlamaRms1)) norm_forward(s.rms1, s.rms1_rstd, s.input, p.rms1_w, d, g);
  if (pieces.has(kLlamaQ)) {
    if (d.qk_norm) {
      linear_forward(s.q_raw, rms1, p.q_w, none, N, C, Q, g, p.q_b);
      qk_norm_forward(s.q, s.q_rstd, static_cast<const T*>(s.q_raw), p.q_norm_w, d.H, d, g);
    } else {
      linear_forward(s.q, rms1, p.q_w, none, N, C, Q, g, p.q_b);
    }
    rope_forward(s.q, rope.cos, rope.sin, N, d.T, d.H, D, g.stream);
  }
  if (pieces.has(kLlamaK)) {
    if (d.qk_norm) {
      linear_forward(s.k_raw, rms1, p.k_w, none, N, C, KV, g, p.k_b);
      qk_norm_forward(s.k, s.k_rstd, static_cast<const T*>(s.k_raw), p.k_norm_w, d.KV_heads, d, g);
    } else {
      linear_forward(s.k, rms1, p.k_w, none, N, C, KV, g, p.k_b);
    }
    rope_forward(s.k, rope.cos, rope.sin, N, d.T, d.KV_heads, D, g.stream);
  }
  if (pieces.has(kLlamaV)) {
    linear_forward(s.v, rms1, p.v_w, none, N, C, KV, g, p.v_b);
    gqa_forward(s, d, g);
  }
  if (pieces.has(kLlamaO)) {
    if (d.sandwich_norm) {  // res2 = input + post_attn(attn @ o_w^T)
      linear_forward(s.attn_out, static_cast<const T*>(s.attn), p.o_w, none, N, Q, C, g);
      norm_forward(s.res2, s.post_attn_rstd, static_cast<const T*>(s.attn_out), p.post_attn_w, d,
                   g);
      residual_forward(s.res2, static_cast<const T*>(s.res2), static_cast<const T*>(s.input), N * C,
                       g.stream);
    } else {
      linear_forward(s.res2, static_cast<const T*>(s.attn), p.o_w, static_cast<const T*>(s.input),
                     N, Q, C, g);
    }
  }
  if (pieces.has(kLlamaRms2))
    norm_forward(s.rms2, s.rms2_rstd, static_cast<const T*>(s.res2), p.rms2_w, d, g);
  if (pieces.has(kLlamaGate))
    linear_forward(s.gate, static_cast<const T*>(s.rms2), p.gate_w, none, N, C, F, g);
  if (pieces.has(kLlamaUp)) {
    linear_forward(s.up, static_cast<const T*>(s.rms2), p.up_w, none, N, C, F, g);
    gate_forward(s.swiglu, static_cast<const T*>(s.gate), static_cast<const T*>(s.up), N * F, d, g);
  }
  if (!pieces.has(kLlamaDown)) return;
  if (d.sandwich_norm) {  // out = res2 + post_mlp(swiglu @ down_w^T)
    linear_forward(s.mlp_out, static_cast<const T*>(s.swiglu), p.down_w, none, N, F, C, g);
    // recompute (out == nullptr): the norm's statistics only
    norm_forward(out, s.post_mlp_rstd, static_cast<const T*>(s.mlp_out), p.post_mlp_w, d, g);
    if (out != nullptr)
      residual_forward(out, static_cast<const T*>(out), static_cast<const T*>(s.res2), N * C,
                       g.stream);
    return;
  }
  // recompute: the saved activations are all it needs
  if (out == nullptr) return;
  linear_forward(out, static_cast<const T*>(s.swiglu), p.down_w, static_cast<const T*>(s.res2), N,
                 F, C, g);
}

template <class T, class G>
void llama_block_backward(const llama_block_grads<G>& grads, const llama_block_params<T>& p,
                          const llama_block_saved<T>& s, const llama_backward_scratch<T>& scratch,
                          const llama_rope& rope, const llama_dims& d, gpu_exec& g,
                          block_pieces pieces) {
  if (d.post_norm) return post_norm_block_backward(grads, p, s, scratch, rope, d, g, pieces);
  const int64_t N = d.N(), C = d.C, F = d.F, KV = d.KV(), Q = d.Q(), D = d.D();
  T* dres = scratch.dres;    // (N, C) d(out) -> d(res2) -> d(input)
  T* dtmp = scratch.dtmp;    // (N, max(C, Q))
  T* dswiglu = scratch.big;  // (N, F) each
  T* dgate = dswiglu + N * F;
  T* dup = dgate + N * F;
  // The norms' fp32 scratch is big where nothing flows in it (before
  // down_proj's backward, and once d(swiglu), d(gate) and d(up) are read),
  // else the attention's delta.
  const fp32_scratch f = big_as_fp32(scratch, d);
  const fp32_scratch delta = delta_as_fp32(scratch, d);
  if (pieces.has(kLlamaDown)) {
    const T* dmlp_out = dres;
    if (d.sandwich_norm) {  // d(mlp_out) through the norm after the MLP, in dtmp
      norm_backward(dtmp, grads.post_mlp_w, static_cast<const T*>(dres),
                    static_cast<const T*>(s.mlp_out), p.post_mlp_w, s.post_mlp_rstd, false, f, d,
                    g);
      dmlp_out = dtmp;
    }
    linear_backward(dswiglu, grads.down_w, dmlp_out, s.swiglu, p.down_w, N, F, C, false, g);
  }
  if (pieces.has(kLlamaUp)) {
    gate_backward(dgate, dup, static_cast<const T*>(dswiglu), static_cast<const T*>(s.gate),
                  static_cast<const T*>(s.up), N * F, d, g);
    linear_backward(dtmp, grads.up_w, static_cast<const T*>(dup), s.rms2, p.up_w, N, C, F, false,
                    g);
  }
  if (pieces.has(kLlamaGate))
    linear_backward(dtmp, grads.gate_w, static_cast<const T*>(dgate), s.rms2, p.gate_w, N, C, F,
                    true, g);
  // dswiglu, dgate and dup are read by now.
  if (pieces.has(kLlamaRms2))
    norm_backward(dres, grads.rms2_w, static_cast<const T*>(dtmp), static_cast<const T*>(s.res2),
                  p.rms2_w, s.rms2_rstd, true, f, d, g);
  if (pieces.has(kLlamaO)) {
    const T* dattn_out = dres;
    if (d.sandwich_norm) {  // d(attn_out) through the norm after attention, in big
      norm_backward(scratch.big, grads.post_attn_w, static_cast<const T*>(dres),
                    static_cast<const T*>(s.attn_out), p.post_attn_w, s.post_attn_rstd, false,
                    delta, d, g);
      dattn_out = scratch.big;
    }
    linear_backward(dtmp, grads.o_w, dattn_out, s.attn, p.o_w, N, Q, C, false, g);
  }
  T* dq = scratch.big;  // (N, Q), then (N, KV) twice
  T* dk = dq + N * Q;
  T* dv = dk + N * KV;
  if (pieces.has(kLlamaV)) {
    gqa_backward(dq, dk, dv, scratch.delta, static_cast<const T*>(dtmp), s, d, g);
    rope_backward(dq, rope.cos, rope.sin, N, d.T, d.H, D, g.stream);
    rope_backward(dk, rope.cos, rope.sin, N, d.T, d.KV_heads, D, g.stream);
    linear_backward(dtmp, grads.v_w, static_cast<const T*>(dv), s.rms1, p.v_w, N, C, KV, false, g,
                    grads.v_b);
  }
  // With qk_norm, d(q) and d(k) before their norms follow d(v) (N, Q), (N, KV).
  T* dq_raw = dv + N * KV;
  T* dk_raw = dq_raw + N * Q;
  if (pieces.has(kLlamaK)) {
    if (d.qk_norm)
      qk_norm_backward(dk_raw, grads.k_norm_w, static_cast<const T*>(dk),
                       static_cast<const T*>(s.k_raw), p.k_norm_w, s.k_rstd, d.KV_heads, delta, d,
                       g);
    linear_backward(dtmp, grads.k_w, static_cast<const T*>(d.qk_norm ? dk_raw : dk), s.rms1, p.k_w,
                    N, C, KV, true, g, grads.k_b);
  }
  if (pieces.has(kLlamaQ)) {
    if (d.qk_norm)
      qk_norm_backward(dq_raw, grads.q_norm_w, static_cast<const T*>(dq),
                       static_cast<const T*>(s.q_raw), p.q_norm_w, s.q_rstd, d.H, delta, d, g);
    linear_backward(dtmp, grads.q_w, static_cast<const T*>(d.qk_norm ? dq_raw : dq), s.rms1, p.q_w,
                    N, C, Q, true, g, grads.q_b);
  }
  // d(q), d(k), d(v) are read by now.
  if (pieces.has(kLlamaRms1))
    norm_backward(dres, grads.rms1_w, static_cast<const T*>(dtmp), static_cast<const T*>(s.input),
                  p.rms1_w, s.rms1_rstd, true, f, d, g);
}

template <class T>
void llama_head_forward(T* logits, float* losses, const int32_t* targets, const T* norm_w,
                        const T* head_w, const llama_final_norm_saved<T>& s, const llama_dims& d,
                        const float* dloss_scale, gpu_exec& g) {
  const int64_t N = d.N(), C = d.C, Vp = d.Vp();
  norm_forward(s.output, s.rstd, static_cast<const T*>(s.input), norm_w, d, g);
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
  norm_backward(scratch.dres, dnorm_w, static_cast<const T*>(scratch.dtmp),
                static_cast<const T*>(s.input), norm_w, s.rstd, false, f, d, g);
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
