// llama (CPU): the per-layer forward/backward composed from the kernels over
// the tensors of runtime/llama.h (runtime/cpu/kernels.h: RMSNorm, SwiGLU,
// grouped-query flash attention, the head and cross-entropy;
// runtime/cpu/kernels_shared.h: the q, k and v biases' column sums;
// runtime/rope.h: rotary positions; nn.Linear GEMMs through runtime/cpu/gemm.h).
#include "runtime/cpu/llama.h"

#include <algorithm>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/kernels_shared.h"
#include "runtime/dtype_pairs.h"
#include "runtime/rope.h"

namespace {

// out (N, OC) = inp (N, IC) @ w^T for w (OC, IC), nn.Linear's layout; with
// `residual`, out = residual + that, with `bias` (OC) out = that + bias (not
// both), rounded once.
template <class T>
void linear_forward(T* out, const T* inp, const T* w, const T* residual, int64_t N, int64_t IC,
                    int64_t OC, const gemm_workspace& ws, const T* bias = nullptr) {
  if (residual) std::copy(residual, residual + N * OC, out);
  if (bias) {
#pragma omp parallel for if (N * OC >= kParallelElems)
    for (int64_t n = 0; n < N; n++)
      std::copy(bias, bias + OC, out + n * OC);
  }
  gemm(false, true, N, OC, IC, 1.0f, inp, IC, w, IC, residual || bias ? 1.0f : 0.0f, out, OC, ws);
}

// dinp (N, IC) = dout @ w (added to dinp with accumulate); dw (OC, IC) += dout^T @ inp;
// dbias (OC) += column sums of dout when given.
template <class T, class G>
void linear_backward(T* dinp, G* dw, const T* dout, const T* inp, const T* w, int64_t N, int64_t IC,
                     int64_t OC, bool accumulate, const gemm_workspace& ws, G* dbias = nullptr) {
  gemm(false, false, N, IC, OC, 1.0f, dout, OC, w, IC, accumulate ? 1.0f : 0.0f, dinp, IC, ws);
  gemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC, ws);
  if (dbias) column_sums_accumulate(dbias, dout, N, OC);
}

// The MLP's gate over n values: act(gate) * up, SwiGLU's SiLU or (gelu_gate,
// Gemma) GeGLU's GELU.
template <class T>
void gate_forward(T* out, const T* gate, const T* up, int64_t n, const llama_dims& d) {
  if (d.gelu_gate)
    geglu_forward(out, gate, up, n);
  else
    swiglu_forward(out, gate, up, n);
}

template <class T>
void gate_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                   const llama_dims& d) {
  if (d.gelu_gate)
    geglu_backward(dgate, dup, dout, gate, up, n);
  else
    swiglu_backward(dgate, dup, dout, gate, up, n);
}

// q's or k's RMSNorm (qk_norm) over `heads` heads of each of N rows: each
// head's D values a norm's row, or across heads all heads * D of them.
template <class T>
void qk_norm_forward(T* out, float* rstd, const T* inp, const T* w, int64_t heads,
                     const llama_dims& d) {
  const int64_t width = heads * d.D(), group = d.qk_norm_across_heads ? width : d.D();
  rmsnorm_forward(out, rstd, inp, w, d.N() * (width / group), group, d.norm_eps,
                  d.norm_weight_offset());
}

template <class T, class G>
void qk_norm_backward(T* dinp, G* dw, const T* dout, const T* inp, const T* w, const float* rstd,
                      int64_t heads, const llama_dims& d) {
  const int64_t width = heads * d.D(), group = d.qk_norm_across_heads ? width : d.D();
  rmsnorm_backward(dinp, dw, dout, inp, w, rstd, d.N() * (width / group), group, false,
                   d.norm_weight_offset());
}

// OLMo 2's block (post_norm, with qk_norm): res2 = input + rms1(attention(input) @ o_w^T),
// out = res2 + rms2(mlp(res2)); pieces in llama_post_piece order.
template <class T>
void post_norm_block_forward(T* out, const llama_block_params<T>& p, const llama_block_saved<T>& s,
                             const llama_rope& rope, const llama_dims& d, const gemm_workspace& ws,
                             block_pieces pieces) {
  const int64_t N = d.N(), C = d.C, F = d.F, KV = d.KV(), Q = d.Q(), D = d.D();
  const T* none = nullptr;
  if (pieces.has(kLlamaPostQ)) {
    linear_forward(s.q_raw, s.input, p.q_w, none, N, C, Q, ws);
    qk_norm_forward(s.q, s.q_rstd, s.q_raw, p.q_norm_w, d.H, d);
    rope_forward(s.q, rope.cos, rope.sin, N, d.T, d.H, D);
  }
  if (pieces.has(kLlamaPostK)) {
    linear_forward(s.k_raw, s.input, p.k_w, none, N, C, KV, ws);
    qk_norm_forward(s.k, s.k_rstd, s.k_raw, p.k_norm_w, d.KV_heads, d);
    rope_forward(s.k, rope.cos, rope.sin, N, d.T, d.KV_heads, D);
  }
  if (pieces.has(kLlamaPostV)) {
    linear_forward(s.v, s.input, p.v_w, none, N, C, KV, ws);
    attention_gqa_forward(s.attn, s.lse, s.q, s.k, s.v, d.B, d.T, d.H, d.KV_heads, D,
                          attention_options_of(d));
  }
  if (pieces.has(kLlamaPostO)) linear_forward(s.attn_out, s.attn, p.o_w, none, N, Q, C, ws);
  if (pieces.has(kLlamaPostRms1)) {
    rmsnorm_forward(s.res2, s.rms1_rstd, s.attn_out, p.rms1_w, N, C, d.norm_eps,
                    d.norm_weight_offset());
    residual_forward(s.res2, s.res2, static_cast<const T*>(s.input), N * C);
  }
  if (pieces.has(kLlamaPostGate)) linear_forward(s.gate, s.res2, p.gate_w, none, N, C, F, ws);
  if (pieces.has(kLlamaPostUp)) {
    linear_forward(s.up, s.res2, p.up_w, none, N, C, F, ws);
    gate_forward(s.swiglu, s.gate, s.up, N * F, d);
  }
  if (pieces.has(kLlamaPostDown)) linear_forward(s.mlp_out, s.swiglu, p.down_w, none, N, F, C, ws);
  if (!pieces.has(kLlamaPostRms2)) return;
  // recompute (out == nullptr): the norm's statistics only
  rmsnorm_forward(out, s.rms2_rstd, s.mlp_out, p.rms2_w, N, C, d.norm_eps, d.norm_weight_offset());
  if (out != nullptr) residual_forward(out, out, static_cast<const T*>(s.res2), N * C);
}

// Between two ranges of pieces the scratch holds what flows: after
// post_feedforward_layernorm dtmp = d(mlp_out) (dres, d(out), is also
// d(res2)'s residual part); after down_proj big = d(swiglu); after up_proj
// big + NF = d(gate) and dres += up's part; after gate_proj dres = d(res2);
// after post_attention_layernorm big = d(attn_out); after o_proj dtmp =
// d(attn); after v_proj big = d(q) | d(k), rotated back; q, k and v add
// their parts of d(input) to dres.
template <class T, class G>
void post_norm_block_backward(const llama_block_grads<G>& g, const llama_block_params<T>& p,
                              const llama_block_saved<T>& s,
                              const llama_backward_scratch<T>& scratch, const llama_rope& rope,
                              const llama_dims& d, const gemm_workspace& ws, block_pieces pieces) {
  const int64_t N = d.N(), C = d.C, F = d.F, KV = d.KV(), Q = d.Q(), D = d.D();
  T* dres = scratch.dres;    // (N, C) d(out) -> d(res2) -> d(input)
  T* dtmp = scratch.dtmp;    // (N, max(C, Q))
  T* dswiglu = scratch.big;  // (N, F) each
  T* dgate = dswiglu + N * F;
  T* dup = dgate + N * F;
  if (pieces.has(kLlamaPostRms2))
    rmsnorm_backward(dtmp, g.rms2_w, dres, s.mlp_out, p.rms2_w, s.rms2_rstd, N, C, false,
                     d.norm_weight_offset());
  if (pieces.has(kLlamaPostDown))
    linear_backward(dswiglu, g.down_w, dtmp, s.swiglu, p.down_w, N, F, C, false, ws);
  if (pieces.has(kLlamaPostUp)) {
    gate_backward(dgate, dup, dswiglu, s.gate, s.up, N * F, d);
    linear_backward(dres, g.up_w, dup, s.res2, p.up_w, N, C, F, true, ws);
  }
  if (pieces.has(kLlamaPostGate))
    linear_backward(dres, g.gate_w, dgate, s.res2, p.gate_w, N, C, F, true, ws);
  T* dattn_out = scratch.big;  // (N, C)
  if (pieces.has(kLlamaPostRms1))
    rmsnorm_backward(dattn_out, g.rms1_w, dres, s.attn_out, p.rms1_w, s.rms1_rstd, N, C, false,
                     d.norm_weight_offset());
  if (pieces.has(kLlamaPostO))
    linear_backward(dtmp, g.o_w, dattn_out, s.attn, p.o_w, N, Q, C, false, ws);
  T* dq = scratch.big;  // (N, Q), (N, KV) twice, then d(q) and d(k) before their norms
  T* dk = dq + N * Q;
  T* dv = dk + N * KV;
  T* dq_raw = dv + N * KV;
  T* dk_raw = dq_raw + N * Q;
  if (pieces.has(kLlamaPostV)) {
    attention_gqa_backward(dq, dk, dv, scratch.delta, dtmp, s.q, s.k, s.v, s.attn, s.lse, d.B, d.T,
                           d.H, d.KV_heads, D, attention_options_of(d));
    rope_backward(dq, rope.cos, rope.sin, N, d.T, d.H, D);
    rope_backward(dk, rope.cos, rope.sin, N, d.T, d.KV_heads, D);
    linear_backward(dres, g.v_w, dv, s.input, p.v_w, N, C, KV, true, ws);
  }
  if (pieces.has(kLlamaPostK)) {
    qk_norm_backward(dk_raw, g.k_norm_w, dk, s.k_raw, p.k_norm_w, s.k_rstd, d.KV_heads, d);
    linear_backward(dres, g.k_w, dk_raw, s.input, p.k_w, N, C, KV, true, ws);
  }
  if (pieces.has(kLlamaPostQ)) {
    qk_norm_backward(dq_raw, g.q_norm_w, dq, s.q_raw, p.q_norm_w, s.q_rstd, d.H, d);
    linear_backward(dres, g.q_w, dq_raw, s.input, p.q_w, N, C, Q, true, ws);
  }
}

// x *= scale over n values.
template <class T>
void scale_in_place(T* x, float scale, int64_t n) {
#pragma omp parallel for simd if (n >= kParallelElems)
  for (int64_t i = 0; i < n; i++)
    x[i] = from_float<T>(to_float(x[i]) * scale);
}

}  // namespace

template <class T>
void llama_embed_forward(T* out, const int32_t* tokens, const T* wte, const llama_dims& d) {
  encoder_forward(out, tokens, wte, static_cast<const T*>(nullptr), d.B, d.T, d.C);
  if (d.scale_embedding) scale_in_place(out, llama_embedding_scale<T>(d), d.N() * d.C);
}

// With scale_embedding, d(input) is scaled in place: the embedding's is the
// step's last use of it.
template <class T, class G>
void llama_embed_backward(G* dwte, const int32_t* tokens, const llama_backward_scratch<T>& s,
                          const llama_dims& d) {
  if (d.scale_embedding) scale_in_place(s.dres, llama_embedding_scale<T>(d), d.N() * d.C);
  encoder_backward(dwte, static_cast<G*>(nullptr), s.dres, tokens, d.B, d.T, d.C);
}

template <class T>
void llama_block_forward(T* out, const llama_block_params<T>& p, const llama_block_saved<T>& s,
                         const llama_rope& rope, const llama_dims& d, const gemm_workspace& ws,
                         block_pieces pieces) {
  if (d.post_norm) return post_norm_block_forward(out, p, s, rope, d, ws, pieces);
  const int64_t N = d.N(), C = d.C, F = d.F, KV = d.KV(), Q = d.Q(), D = d.D();
  const T* none = nullptr;
  if (pieces.has(kLlamaRms1))
    rmsnorm_forward(s.rms1, s.rms1_rstd, s.input, p.rms1_w, N, C, d.norm_eps,
                    d.norm_weight_offset());
  if (pieces.has(kLlamaQ)) {
    if (d.qk_norm) {
      linear_forward(s.q_raw, s.rms1, p.q_w, none, N, C, Q, ws, p.q_b);
      qk_norm_forward(s.q, s.q_rstd, s.q_raw, p.q_norm_w, d.H, d);
    } else {
      linear_forward(s.q, s.rms1, p.q_w, none, N, C, Q, ws, p.q_b);
    }
    rope_forward(s.q, rope.cos, rope.sin, N, d.T, d.H, D);
  }
  if (pieces.has(kLlamaK)) {
    if (d.qk_norm) {
      linear_forward(s.k_raw, s.rms1, p.k_w, none, N, C, KV, ws, p.k_b);
      qk_norm_forward(s.k, s.k_rstd, s.k_raw, p.k_norm_w, d.KV_heads, d);
    } else {
      linear_forward(s.k, s.rms1, p.k_w, none, N, C, KV, ws, p.k_b);
    }
    rope_forward(s.k, rope.cos, rope.sin, N, d.T, d.KV_heads, D);
  }
  if (pieces.has(kLlamaV)) {
    linear_forward(s.v, s.rms1, p.v_w, none, N, C, KV, ws, p.v_b);
    attention_gqa_forward(s.attn, s.lse, s.q, s.k, s.v, d.B, d.T, d.H, d.KV_heads, D,
                          attention_options_of(d));
  }
  if (pieces.has(kLlamaO)) {
    if (d.sandwich_norm) {  // res2 = input + post_attn(attn @ o_w^T)
      linear_forward(s.attn_out, s.attn, p.o_w, none, N, Q, C, ws);
      rmsnorm_forward(s.res2, s.post_attn_rstd, s.attn_out, p.post_attn_w, N, C, d.norm_eps,
                      d.norm_weight_offset());
      residual_forward(s.res2, s.res2, static_cast<const T*>(s.input), N * C);
    } else {
      linear_forward(s.res2, s.attn, p.o_w, static_cast<const T*>(s.input), N, Q, C, ws);
    }
  }
  if (pieces.has(kLlamaRms2))
    rmsnorm_forward(s.rms2, s.rms2_rstd, s.res2, p.rms2_w, N, C, d.norm_eps,
                    d.norm_weight_offset());
  if (pieces.has(kLlamaGate)) linear_forward(s.gate, s.rms2, p.gate_w, none, N, C, F, ws);
  if (pieces.has(kLlamaUp)) {
    linear_forward(s.up, s.rms2, p.up_w, none, N, C, F, ws);
    gate_forward(s.swiglu, s.gate, s.up, N * F, d);
  }
  if (!pieces.has(kLlamaDown)) return;
  if (d.sandwich_norm) {  // out = res2 + post_mlp(swiglu @ down_w^T)
    linear_forward(s.mlp_out, s.swiglu, p.down_w, none, N, F, C, ws);
    // recompute (out == nullptr): the norm's statistics only
    rmsnorm_forward(out, s.post_mlp_rstd, s.mlp_out, p.post_mlp_w, N, C, d.norm_eps,
                    d.norm_weight_offset());
    if (out != nullptr) residual_forward(out, out, static_cast<const T*>(s.res2), N * C);
    return;
  }
  // recompute: the saved activations are all it needs
  if (out == nullptr) return;
  linear_forward(out, s.swiglu, p.down_w, static_cast<const T*>(s.res2), N, F, C, ws);
}

template <class T, class G>
void llama_block_backward(const llama_block_grads<G>& g, const llama_block_params<T>& p,
                          const llama_block_saved<T>& s, const llama_backward_scratch<T>& scratch,
                          const llama_rope& rope, const llama_dims& d, const gemm_workspace& ws,
                          block_pieces pieces) {
  if (d.post_norm) return post_norm_block_backward(g, p, s, scratch, rope, d, ws, pieces);
  const int64_t N = d.N(), C = d.C, F = d.F, KV = d.KV(), Q = d.Q(), D = d.D();
  T* dres = scratch.dres;  // (N, C) d(out) -> d(res2) -> d(input)
  T* dtmp = scratch.dtmp;  // (N, max(C, Q))
  // MLP: out = res2 + (act(rms2 @ gate_w^T) * (rms2 @ up_w^T)) @ down_w^T, act SiLU or
  // (gelu_gate) GELU.
  T* dswiglu = scratch.big;  // (N, F) each
  T* dgate = dswiglu + N * F;
  T* dup = dgate + N * F;
  if (pieces.has(kLlamaDown)) {
    const T* dmlp_out = dres;
    if (d.sandwich_norm) {  // d(mlp_out) through the norm after the MLP, in dtmp
      rmsnorm_backward(dtmp, g.post_mlp_w, dres, s.mlp_out, p.post_mlp_w, s.post_mlp_rstd, N, C,
                       false, d.norm_weight_offset());
      dmlp_out = dtmp;
    }
    linear_backward(dswiglu, g.down_w, dmlp_out, s.swiglu, p.down_w, N, F, C, false, ws);
  }
  if (pieces.has(kLlamaUp)) {
    gate_backward(dgate, dup, dswiglu, s.gate, s.up, N * F, d);
    linear_backward(dtmp, g.up_w, dup, s.rms2, p.up_w, N, C, F, false, ws);
  }
  if (pieces.has(kLlamaGate))
    linear_backward(dtmp, g.gate_w, dgate, s.rms2, p.gate_w, N, C, F, true, ws);
  if (pieces.has(kLlamaRms2))
    rmsnorm_backward(dres, g.rms2_w, dtmp, s.res2, p.rms2_w, s.rms2_rstd, N, C, true,
                     d.norm_weight_offset());
  // Attention: res2 = input + attention(rope(q), rope(k), v) @ o_w^T.
  if (pieces.has(kLlamaO)) {
    const T* dattn_out = dres;
    if (d.sandwich_norm) {  // d(attn_out) through the norm after attention, in big
      rmsnorm_backward(scratch.big, g.post_attn_w, dres, s.attn_out, p.post_attn_w,
                       s.post_attn_rstd, N, C, false, d.norm_weight_offset());
      dattn_out = scratch.big;
    }
    linear_backward(dtmp, g.o_w, dattn_out, s.attn, p.o_w, N, Q, C, false, ws);
  }
  T* dq = scratch.big;  // (N, Q), then (N, KV) twice
  T* dk = dq + N * Q;
  T* dv = dk + N * KV;
  if (pieces.has(kLlamaV)) {
    attention_gqa_backward(dq, dk, dv, scratch.delta, dtmp, s.q, s.k, s.v, s.attn, s.lse, d.B, d.T,
                           d.H, d.KV_heads, D, attention_options_of(d));
    rope_backward(dq, rope.cos, rope.sin, N, d.T, d.H, D);
    rope_backward(dk, rope.cos, rope.sin, N, d.T, d.KV_heads, D);
    linear_backward(dtmp, g.v_w, dv, s.rms1, p.v_w, N, C, KV, false, ws, g.v_b);
  }
  // With qk_norm, d(q) and d(k) before their norms follow d(v) (N, Q), (N, KV).
  T* dq_raw = dv + N * KV;
  T* dk_raw = dq_raw + N * Q;
  if (pieces.has(kLlamaK)) {
    if (d.qk_norm)
      qk_norm_backward(dk_raw, g.k_norm_w, dk, s.k_raw, p.k_norm_w, s.k_rstd, d.KV_heads, d);
    linear_backward(dtmp, g.k_w, d.qk_norm ? dk_raw : dk, s.rms1, p.k_w, N, C, KV, true, ws, g.k_b);
  }
  if (pieces.has(kLlamaQ)) {
    if (d.qk_norm) qk_norm_backward(dq_raw, g.q_norm_w, dq, s.q_raw, p.q_norm_w, s.q_rstd, d.H, d);
    linear_backward(dtmp, g.q_w, d.qk_norm ? dq_raw : dq, s.rms1, p.q_w, N, C, Q, true, ws, g.q_b);
  }
  if (pieces.has(kLlamaRms1))
    rmsnorm_backward(dres, g.rms1_w, dtmp, s.input, p.rms1_w, s.rms1_rstd, N, C, true,
                     d.norm_weight_offset());
}

template <class T>
void llama_head_forward(T* logits, float* losses, const int32_t* targets, const T* norm_w,
                        const T* head_w, const llama_final_norm_saved<T>& s, const llama_dims& d,
                        float dloss_scale, const gemm_workspace& ws) {
  rmsnorm_forward(s.output, s.rstd, s.input, norm_w, d.N(), d.C, d.norm_eps,
                  d.norm_weight_offset());
  lm_head_forward(logits, s.output, head_w, d.N(), d.C, d.Vp(), ws);
  cross_entropy_fused(logits, losses, targets, d.N(), d.V, d.Vp(), dloss_scale, d.logit_softcap);
}

template <class T, class G>
void llama_head_backward(G* dnorm_w, G* dhead_w, const T* norm_w, const T* head_w, const T* logits,
                         const llama_final_norm_saved<T>& s,
                         const llama_backward_scratch<T>& scratch, const llama_dims& d,
                         const gemm_workspace& ws) {
  lm_head_backward(scratch.dtmp, dhead_w, logits, s.output, head_w, d.N(), d.C, d.Vp(), ws);
  rmsnorm_backward(scratch.dres, dnorm_w, scratch.dtmp, s.input, norm_w, s.rstd, d.N(), d.C, false,
                   d.norm_weight_offset());
}

#define LLAMA_INSTANTIATE_T(T)                                                                    \
  template void llama_embed_forward<T>(T*, const int32_t*, const T*, const llama_dims&);          \
  template void llama_block_forward<T>(T*, const llama_block_params<T>&,                          \
                                       const llama_block_saved<T>&, const llama_rope&,            \
                                       const llama_dims&, const gemm_workspace&, block_pieces);   \
  template void llama_head_forward<T>(T*, float*, const int32_t*, const T*, const T*,             \
                                      const llama_final_norm_saved<T>&, const llama_dims&, float, \
                                      const gemm_workspace&);

#define LLAMA_INSTANTIATE_TG(T, G)                                                               \
  template void llama_embed_backward<T, G>(G*, const int32_t*, const llama_backward_scratch<T>&, \
                                           const llama_dims&);                                   \
  template void llama_block_backward<T, G>(                                                      \
      const llama_block_grads<G>&, const llama_block_params<T>&, const llama_block_saved<T>&,    \
      const llama_backward_scratch<T>&, const llama_rope&, const llama_dims&,                    \
      const gemm_workspace&, block_pieces);                                                      \
  template void llama_head_backward<T, G>(                                                       \
      G*, G*, const T*, const T*, const T*, const llama_final_norm_saved<T>&,                    \
      const llama_backward_scratch<T>&, const llama_dims&, const gemm_workspace&);

FSDPGEN_FOR_EACH_DTYPE(LLAMA_INSTANTIATE_T)
FSDPGEN_FOR_EACH_DTYPE_PAIR(LLAMA_INSTANTIATE_TG)
