// gpt2 (CPU): the per-layer forward/backward that compose runtime/cpu/kernels.h
// over the tensors of runtime/gpt2.h.
#include "runtime/cpu/gpt2.h"

#include "runtime/cpu/kernels.h"
#include "runtime/dtype_pairs.h"

template <class T>
void gpt2_embed_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                        const gpt2_dims& d) {
  encoder_forward(out, tokens, wte, wpe, d.B, d.T, d.C);
}

template <class T, class G>
void gpt2_embed_backward(G* dwte, G* dwpe, const int32_t* tokens, const gpt2_backward_scratch<T>& s,
                         const gpt2_dims& d) {
  encoder_backward(dwte, dwpe, s.dres, tokens, d.B, d.T, d.C);
}

template <class T>
void gpt2_block_forward(T* out, const gpt2_block_params<T>& p, const gpt2_block_saved<T>& s,
                        const gpt2_dims& d, const gemm_workspace& ws, block_pieces pieces) {
  const int64_t N = d.N(), C = d.C, F = d.F;
  if (pieces.has(kGpt2Ln1))
    layernorm_forward(s.ln1, s.ln1_mean, s.ln1_rstd, s.input, p.ln1_w, p.ln1_b, N, C);
  if (pieces.has(kGpt2Qkv)) {
    matmul_forward(s.qkv, s.ln1, p.qkv_w, p.qkv_b, N, C, 3 * C, ws);
    if (d.flash)
      attention_forward_flash(s.attn, s.lse, s.qkv, d.B, d.T, C, d.H);
    else
      attention_forward(s.attn, s.probs, s.qkv, d.B, d.T, C, d.H, ws);
  }
  if (pieces.has(kGpt2Proj)) {
    matmul_forward(s.res2, s.attn, p.proj_w, p.proj_b, N, C, C, ws);
    residual_forward(s.res2, s.res2, s.input, N * C);
  }
  if (pieces.has(kGpt2Ln2))
    layernorm_forward(s.ln2, s.ln2_mean, s.ln2_rstd, s.res2, p.ln2_w, p.ln2_b, N, C);
  if (pieces.has(kGpt2Fc)) {
    matmul_forward(s.fc, s.ln2, p.fc_w, p.fc_b, N, C, F, ws);
    gelu_forward(s.gelu, s.fc, N * F);
  }
  // recompute: the saved activations are all it needs
  if (out == nullptr || !pieces.has(kGpt2Fc2)) return;
  matmul_forward(out, s.gelu, p.fc2_w, p.fc2_b, N, F, C, ws);
  residual_forward(out, out, s.res2, N * C);
}

template <class T, class G>
void gpt2_block_backward(const gpt2_block_grads<G>& g, const gpt2_block_params<T>& p,
                         const gpt2_block_saved<T>& s, const gpt2_backward_scratch<T>& scratch,
                         const gpt2_dims& d, const gemm_workspace& ws, block_pieces pieces) {
  const int64_t N = d.N(), C = d.C, F = d.F;
  T* dres = scratch.dres;  // (N, C) d(out) -> d(res2) -> d(input)
  T* dtmp = scratch.dtmp;  // (N, C)
  T* big = scratch.big;    // (N, F) as d(gelu), d(fc); (N, 3C) d(qkv) [then (B, H, T, T) dprobs]
  // MLP: out = res2 + gelu(ln2 @ fc_w + fc_b) @ fc2_w + fc2_b.
  if (pieces.has(kGpt2Fc2)) {
    matmul_backward(big, g.fc2_w, g.fc2_b, dres, s.gelu, p.fc2_w, N, F, C, ws);
    gelu_backward(big, s.fc, big, N * F);
  }
  if (pieces.has(kGpt2Fc)) matmul_backward(dtmp, g.fc_w, g.fc_b, big, s.ln2, p.fc_w, N, C, F, ws);
  if (pieces.has(kGpt2Ln2))
    layernorm_backward(dres, g.ln2_w, g.ln2_b, dtmp, s.res2, p.ln2_w, s.ln2_mean, s.ln2_rstd, N, C,
                       true);
  // Attention: res2 = input + attention(ln1 @ qkv_w + qkv_b) @ proj_w + proj_b.
  if (pieces.has(kGpt2Proj))
    matmul_backward(dtmp, g.proj_w, g.proj_b, dres, s.attn, p.proj_w, N, C, C, ws);
  if (pieces.has(kGpt2Qkv)) {
    T* dqkv = big;  // (N, 3C)
    if (d.flash) {
      attention_backward_flash(dqkv, scratch.delta, dtmp, s.qkv, s.attn, s.lse, d.B, d.T, C, d.H);
    } else {
      T* dprobs = big + N * 3 * C;  // (B, H, T, T)
      attention_backward(dqkv, dprobs, dtmp, s.qkv, s.probs, d.B, d.T, C, d.H, ws);
    }
    matmul_backward(dtmp, g.qkv_w, g.qkv_b, dqkv, s.ln1, p.qkv_w, N, C, 3 * C, ws);
  }
  if (pieces.has(kGpt2Ln1))
    layernorm_backward(dres, g.ln1_w, g.ln1_b, dtmp, s.input, p.ln1_w, s.ln1_mean, s.ln1_rstd, N, C,
                       true);
}

template <class T>
void gpt2_head_forward(T* logits, float* losses, const int32_t* targets, const T* lnf_w,
                       const T* lnf_b, const T* head_w, const gpt2_final_norm_saved<T>& s,
                       const gpt2_dims& d, float dloss_scale, const gemm_workspace& ws) {
  layernorm_forward(s.output, s.mean, s.rstd, s.input, lnf_w, lnf_b, d.N(), d.C);
  lm_head_forward(logits, s.output, head_w, d.N(), d.C, d.Vp(), ws);
  cross_entropy_fused(logits, losses, targets, d.N(), d.V, d.Vp(), dloss_scale);
}

template <class T, class G>
void gpt2_head_backward(G* dlnf_w, G* dlnf_b, G* dhead_w, const T* lnf_w, const T* head_w,
                        const T* logits, const gpt2_final_norm_saved<T>& s,
                        const gpt2_backward_scratch<T>& scratch, const gpt2_dims& d,
                        const gemm_workspace& ws) {
  lm_head_backward(scratch.dtmp, dhead_w, logits, s.output, head_w, d.N(), d.C, d.Vp(), ws);
  layernorm_backward(scratch.dres, dlnf_w, dlnf_b, scratch.dtmp, s.input, lnf_w, s.mean, s.rstd,
                     d.N(), d.C, false);
}

#define GPT2_INSTANTIATE_T(T)                                                                      \
  template void gpt2_embed_forward<T>(T*, const int32_t*, const T*, const T*, const gpt2_dims&);   \
  template void gpt2_block_forward<T>(T*, const gpt2_block_params<T>&, const gpt2_block_saved<T>&, \
                                      const gpt2_dims&, const gemm_workspace&, block_pieces);      \
  template void gpt2_head_forward<T>(T*, float*, const int32_t*, const T*, const T*, const T*,     \
                                     const gpt2_final_norm_saved<T>&, const gpt2_dims&, float,     \
                                     const gemm_workspace&);

#define GPT2_INSTANTIATE_TG(T, G)                                                                  \
  template void gpt2_embed_backward<T, G>(G*, G*, const int32_t*, const gpt2_backward_scratch<T>&, \
                                          const gpt2_dims&);                                       \
  template void gpt2_block_backward<T, G>(                                                         \
      const gpt2_block_grads<G>&, const gpt2_block_params<T>&, const gpt2_block_saved<T>&,         \
      const gpt2_backward_scratch<T>&, const gpt2_dims&, const gemm_workspace&, block_pieces);     \
  template void gpt2_head_backward<T, G>(                                                          \
      G*, G*, G*, const T*, const T*, const T*, const gpt2_final_norm_saved<T>&,                   \
      const gpt2_backward_scratch<T>&, const gpt2_dims&, const gemm_workspace&);

FSDPGEN_FOR_EACH_DTYPE(GPT2_INSTANTIATE_T)
FSDPGEN_FOR_EACH_DTYPE_PAIR(GPT2_INSTANTIATE_TG)
