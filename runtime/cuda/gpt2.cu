// gpt2 (CUDA): the layers of gpt2.h, straight-line per layer as in
// runtime/cpu/gpt2.cpp, on the CUDA kernels, cuda_gemm and attention.
#include "runtime/cuda/gpt2.h"

#include <cstddef>
#include <type_traits>

#include "runtime/cuda/attention.h"
#include "runtime/cuda/cudnn_attention.h"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/kernels.cuh"
#include "runtime/dtype_pairs.h"

namespace {

// Conv1D: out = inp @ weight + bias (+ residual when given), weight (IC, OC),
// summed in fp32 and rounded to T once (cuBLASLt's bias epilogue, beta = 1
// on the residual).
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, const T* residual,
                    int64_t N, int64_t IC, int64_t OC, gpu_exec& g) {
  cuda_gemm_extras<T> e;
  e.bias = bias;
  e.c_in = residual;
  cuda_gemm(false, false, N, OC, IC, 1.0f, inp, IC, weight, OC, residual ? 1.0f : 0.0f, out, OC, g,
            e);
}

// Bytes from p up to a multiple of 16.
int64_t padding_to_16(const void* p) {
  return static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(p) % 16) % 16);
}

// scratch.big, free between the uses the backward makes of it, as fp32
// scratch for the LayerNorm and embedding kernels' partial sums: its
// (N, 2F) values of T, from its first 16-byte boundary.
struct fp32_scratch {
  float* data;
  int64_t floats;
};
template <class T>
fp32_scratch big_as_fp32(const gpt2_backward_scratch<T>& s, const gpt2_dims& d) {
  const int64_t pad_bytes = padding_to_16(s.big);
  const int64_t bytes = d.N() * 2 * d.F * static_cast<int64_t>(sizeof(T)) - pad_bytes;
  return {reinterpret_cast<float*>(reinterpret_cast<std::byte*>(s.big) + pad_bytes), bytes / 4};
}

// dinp = dout @ weight^T (overwritten), times gelu'(gelu_inp) when that is
// given (GELU's backward in the GEMM's epilogue); dweight += inp^T @ dout;
// dbias += column sums of dout. The column sums run first, with dinp's
// buffer (N * IC elements, not aliasing dout) as scratch: with fp32
// gradients inside the dweight GEMM (its bgrad_b epilogue, into the buffer's
// first OC floats, then added to dbias), else on their own kernel.
template <class T, class G>
void matmul_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t IC, int64_t OC, gpu_exec& g, const T* gelu_inp = nullptr) {
  const int64_t buffer_bytes = N * IC * static_cast<int64_t>(sizeof(T));
  bool fused = false;
  if constexpr (std::is_same_v<G, float>) {
    const int64_t pad_bytes = padding_to_16(dinp);
    const int64_t sums_floats = (OC + 3) / 4 * 4;  // keeps the scratch after them 16-byte aligned
    const int64_t scratch_floats = (buffer_bytes - pad_bytes) / 4 - sums_floats;
    float* sums = reinterpret_cast<float*>(reinterpret_cast<std::byte*>(dinp) + pad_bytes);
    if (scratch_floats >= 0) {
      cuda_gemm_extras<float> e;
      e.epilogue = gemm_epilogue::bgrad_b;
      e.bias_grad = sums;
      e.scratch = sums + sums_floats;
      e.scratch_floats = scratch_floats;
      cuda_gemm(true, false, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dweight, OC, g, e);
      cuda_gemm_bias_backward(dbias, static_cast<const float*>(sums), 1, OC, nullptr, 0, g.stream);
      fused = true;
    }
  }
  if (!fused) {
    cuda_gemm_bias_backward(dbias, dout, N, OC, reinterpret_cast<float*>(dinp), buffer_bytes / 4,
                            g.stream);
    cuda_gemm(true, false, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dweight, OC, g);
  }
  cuda_gemm_extras<T> e;
  if (gelu_inp) {
    e.epilogue = gemm_epilogue::dgelu;
    e.aux = const_cast<T*>(gelu_inp);  // read only: dgelu reads aux
    e.aux_ld = IC;
  }
  cuda_gemm(false, true, N, IC, OC, 1.0f, dout, OC, weight, OC, 0.0f, dinp, IC, g, e);
}

// Flash attention (the plan saves lse): through cuDNN when the backend set
// up g.attention (16-bit, runtime/cuda/cudnn_attention.h's choice), else on
// the hand-written kernels.
template <class T>
constexpr bool kCudnnTakes = !std::is_same_v<T, float>;

template <class T>
void flash_forward(T* out, float* lse, const T* qkv, const gpt2_dims& d, gpu_exec& g) {
  if constexpr (kCudnnTakes<T>)
    if (g.attention) return cuda_cudnn_attention_forward(out, lse, qkv, d.B, d.T, d.C, d.H, g);
  cuda_attention_forward_flash(out, lse, qkv, d.B, d.T, d.C, d.H, g);
}

// dqkv from dout and the saved out and lse; delta is the flash kernels' scratch.
template <class T>
void flash_backward(T* dqkv, float* delta, const T* dout, const T* qkv, const T* out,
                    const float* lse, const gpt2_dims& d, gpu_exec& g) {
  if constexpr (kCudnnTakes<T>)
    if (g.attention)
      return cuda_cudnn_attention_backward(dqkv, dout, qkv, out, lse, d.B, d.T, d.C, d.H, g);
  cuda_attention_backward_flash(dqkv, delta, dout, qkv, out, lse, d.B, d.T, d.C, d.H, g);
}

}  // namespace

template <class T>
void gpt2_embed_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                        const gpt2_dims& d, gpu_exec& g) {
  encoder_forward(out, tokens, wte, wpe, d.B, d.T, d.C, g.stream);
}

template <class T, class G>
void gpt2_embed_backward(G* dwte, G* dwpe, const int32_t* tokens, const gpt2_backward_scratch<T>& s,
                         const gpt2_dims& d, gpu_exec& g) {
  const fp32_scratch f = big_as_fp32(s, d);
  encoder_backward(dwte, dwpe, s.dres, tokens, d.B, d.T, d.C, f.data, f.floats * 4, g.stream);
}

template <class T>
void gpt2_block_forward(T* out, const gpt2_block_params<T>& p, const gpt2_block_saved<T>& s,
                        const gpt2_dims& d, gpu_exec& g, block_pieces pieces) {
  const int64_t N = d.N(), C = d.C, F = d.F;
  if (pieces.has(kGpt2Ln1))
    layernorm_forward(s.ln1, s.ln1_mean, s.ln1_rstd, s.input, p.ln1_w, p.ln1_b, N, C, g.stream);
  if (pieces.has(kGpt2Qkv)) {
    matmul_forward(s.qkv, s.ln1, p.qkv_w, p.qkv_b, static_cast<const T*>(nullptr), N, C, 3 * C, g);
    if (d.flash)
      flash_forward(s.attn, s.lse, static_cast<const T*>(s.qkv), d, g);
    else
      cuda_attention_forward(s.attn, s.probs, s.qkv, d.B, d.T, C, d.H, g);
  }
  if (pieces.has(kGpt2Proj))
    matmul_forward(s.res2, s.attn, p.proj_w, p.proj_b, static_cast<const T*>(s.input), N, C, C, g);
  if (pieces.has(kGpt2Ln2))
    layernorm_forward(s.ln2, s.ln2_mean, s.ln2_rstd, s.res2, p.ln2_w, p.ln2_b, N, C, g.stream);
  if (pieces.has(kGpt2Fc)) {
    // fc = ln2 @ fc_w + fc_b (GELU's input, saved) and gelu = GELU(fc) in one GEMM.
    cuda_gemm_extras<T> gelu;
    gelu.bias = p.fc_b;
    gelu.epilogue = gemm_epilogue::gelu_aux;
    gelu.aux = s.fc;
    gelu.aux_ld = F;
    cuda_gemm(false, false, N, F, C, 1.0f, static_cast<const T*>(s.ln2), C, p.fc_w, F, 0.0f, s.gelu,
              F, g, gelu);
  }
  // recompute: the saved activations are all it needs
  if (out == nullptr || !pieces.has(kGpt2Fc2)) return;
  matmul_forward(out, s.gelu, p.fc2_w, p.fc2_b, static_cast<const T*>(s.res2), N, F, C, g);
}

template <class T, class G>
void gpt2_block_backward(const gpt2_block_grads<G>& grads, const gpt2_block_params<T>& p,
                         const gpt2_block_saved<T>& s, const gpt2_backward_scratch<T>& scratch,
                         const gpt2_dims& d, gpu_exec& g, block_pieces pieces) {
  const int64_t N = d.N(), C = d.C, F = d.F;
  T* dres = scratch.dres;  // (N, C) d(out) -> d(res2) -> d(input)
  T* dtmp = scratch.dtmp;  // (N, C)
  T* big = scratch.big;    // (N, F) as d(gelu), d(fc); (N, 3C) d(qkv) [then (B, H, T, T) dprobs]
  // The norms' fp32 partial sums use big once its gradient has been read.
  const fp32_scratch f = big_as_fp32(scratch, d);
  // MLP: out = res2 + gelu(ln2 @ fc_w + fc_b) @ fc2_w + fc2_b.
  if (pieces.has(kGpt2Fc2))
    matmul_backward(big, grads.fc2_w, grads.fc2_b, dres, s.gelu, p.fc2_w, N, F, C, g,
                    static_cast<const T*>(s.fc));  // big = d(fc): GELU's backward in the GEMM
  if (pieces.has(kGpt2Fc))
    matmul_backward(dtmp, grads.fc_w, grads.fc_b, big, s.ln2, p.fc_w, N, C, F, g);
  if (pieces.has(kGpt2Ln2))
    layernorm_backward(dres, grads.ln2_w, grads.ln2_b, dtmp, s.res2, p.ln2_w, s.ln2_mean,
                       s.ln2_rstd, N, C, true, f.data, f.floats, g.stream);
  // Attention: res2 = input + attention(ln1 @ qkv_w + qkv_b) @ proj_w + proj_b.
  if (pieces.has(kGpt2Proj))
    matmul_backward(dtmp, grads.proj_w, grads.proj_b, dres, s.attn, p.proj_w, N, C, C, g);
  if (pieces.has(kGpt2Qkv)) {
    T* dqkv = big;  // (N, 3C)
    if (d.flash) {
      flash_backward(dqkv, scratch.delta, static_cast<const T*>(dtmp), static_cast<const T*>(s.qkv),
                     static_cast<const T*>(s.attn), static_cast<const float*>(s.lse), d, g);
    } else {
      T* dprobs = big + N * 3 * C;  // (B, H, T, T)
      cuda_attention_backward(dqkv, dprobs, dtmp, s.qkv, s.probs, d.B, d.T, C, d.H, g);
    }
    matmul_backward(dtmp, grads.qkv_w, grads.qkv_b, dqkv, s.ln1, p.qkv_w, N, C, 3 * C, g);
  }
  // big's d(qkv) is read by now
  if (pieces.has(kGpt2Ln1))
    layernorm_backward(dres, grads.ln1_w, grads.ln1_b, dtmp, s.input, p.ln1_w, s.ln1_mean,
                       s.ln1_rstd, N, C, true, f.data, f.floats, g.stream);
}

template <class T>
void gpt2_head_forward(T* logits, float* losses, const int32_t* targets, const T* lnf_w,
                       const T* lnf_b, const T* head_w, const gpt2_final_norm_saved<T>& s,
                       const gpt2_dims& d, const float* dloss_scale, gpu_exec& g) {
  const int64_t N = d.N(), C = d.C, Vp = d.Vp();
  layernorm_forward(s.output, s.mean, s.rstd, s.input, lnf_w, lnf_b, N, C, g.stream);
  // logits = output @ head_w^T, head_w (Vp, C): over the padded vocabulary,
  // whose multiple-of-128 width keeps cuBLASLt on its aligned kernels.
  cuda_gemm(false, true, N, Vp, C, 1.0f, static_cast<const T*>(s.output), C, head_w, C, 0.0f,
            logits, Vp, g);
  cross_entropy_fused(logits, losses, targets, N, d.V, Vp, dloss_scale, 0.0f, g.stream);
}

template <class T, class G>
void gpt2_head_backward(G* dlnf_w, G* dlnf_b, G* dhead_w, const T* lnf_w, const T* head_w,
                        const T* logits, const gpt2_final_norm_saved<T>& s,
                        const gpt2_backward_scratch<T>& scratch, const gpt2_dims& d, gpu_exec& g) {
  const int64_t N = d.N(), C = d.C, Vp = d.Vp();
  // dx = dlogits @ head_w (overwritten); dhead_w += dlogits^T @ x, over the
  // padded vocabulary: dlogits' padded columns are zero, so are the padded
  // rows' gradients.
  cuda_gemm(false, false, N, C, Vp, 1.0f, logits, Vp, head_w, C, 0.0f, scratch.dtmp, C, g);
  cuda_gemm(true, false, Vp, C, N, 1.0f, logits, Vp, static_cast<const T*>(s.output), C, 1.0f,
            dhead_w, C, g);
  const fp32_scratch f = big_as_fp32(scratch, d);  // big is unused by the head
  layernorm_backward(scratch.dres, dlnf_w, dlnf_b, scratch.dtmp, s.input, lnf_w, s.mean, s.rstd, N,
                     C, false, f.data, f.floats, g.stream);
}

#define CUDA_GPT2_INSTANTIATE_T(T)                                                                 \
  template void gpt2_embed_forward<T>(T*, const int32_t*, const T*, const T*, const gpt2_dims&,    \
                                      gpu_exec&);                                                  \
  template void gpt2_block_forward<T>(T*, const gpt2_block_params<T>&, const gpt2_block_saved<T>&, \
                                      const gpt2_dims&, gpu_exec&, block_pieces);                  \
  template void gpt2_head_forward<T>(T*, float*, const int32_t*, const T*, const T*, const T*,     \
                                     const gpt2_final_norm_saved<T>&, const gpt2_dims&,            \
                                     const float*, gpu_exec&);

#define CUDA_GPT2_INSTANTIATE_TG(T, G)                                                             \
  template void gpt2_embed_backward<T, G>(G*, G*, const int32_t*, const gpt2_backward_scratch<T>&, \
                                          const gpt2_dims&, gpu_exec&);                            \
  template void gpt2_block_backward<T, G>(                                                         \
      const gpt2_block_grads<G>&, const gpt2_block_params<T>&, const gpt2_block_saved<T>&,         \
      const gpt2_backward_scratch<T>&, const gpt2_dims&, gpu_exec&, block_pieces);                 \
  template void gpt2_head_backward<T, G>(                                                          \
      G*, G*, G*, const T*, const T*, const T*, const gpt2_final_norm_saved<T>&,                   \
      const gpt2_backward_scratch<T>&, const gpt2_dims&, gpu_exec&);

FSDPGEN_FOR_EACH_DTYPE(CUDA_GPT2_INSTANTIATE_T)
FSDPGEN_FOR_EACH_DTYPE_PAIR(CUDA_GPT2_INSTANTIATE_TG)
