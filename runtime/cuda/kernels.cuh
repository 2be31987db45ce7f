// kernels (CUDA): the gpt2 family's encoder, LayerNorm, GELU, residual and
// fused cross-entropy kernels, AdamW and the gradient norm's sum of squares on
// the GPU. Each computes what its CPU counterpart computes (runtime/cpu/kernels.h,
// runtime/optimizer.h, step_add_grad_norm in runtime/cpu/step.h), which is the
// reference tests/cuda/KernelTest.cpp compares it against. GEMMs and attention
// are not here (cuBLASLt). Each has its CPU twin's name and arguments, plus
// the stream last (llm.c's train_gpt2.c and .cu keep one vocabulary too);
// cuda_sum_squares has no CPU twin of its own (step_add_grad_norm loops).
//
// T is the storage type of params and activations, G that of parameter
// gradients: float or bf16 (runtime/dtype.h; on the device the same bits are
// read as __nv_bfloat16). All arithmetic is fp32. Each launcher enqueues its
// kernels on `stream` and returns: none allocates or synchronizes. Launch
// errors throw (CUDA_CHECK); faults inside a kernel surface at the next
// synchronizing call.
//
// Shapes: B sequences of T tokens, N = B*T rows, C channels, V vocab.
// Backward launchers accumulate (+=) into parameter gradients and overwrite
// input gradients unless a flag says otherwise, as the CPU kernels do. Sums
// are deterministic: no atomics, a fixed reduction order for given shapes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/dtype.h"

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:] (wpe null: llama, no positions)
template <class T>
void encoder_forward(T* out,                 // (N, C)
                     const int32_t* tokens,  // (N)
                     const T* wte,           // (V, C)
                     const T* wpe,           // (T, C) or null
                     int64_t B, int64_t T_, int64_t C, cudaStream_t stream);
// dwte[tokens[n]] += dout[n] in position order (a bf16 dwte is rounded once
// per occurrence of a token, as on CPU); dwpe[t] += sum over b of dout[b, t]
// (dwpe null: none).
// With scratch (scratch_bytes of device memory: 16 N bytes plus CUB's radix
// sort storage, a few KiB) the positions are sorted by token (stable) and a
// block adds each token's rows; with less (or null), a thread owns a channel
// and the tokens of one residue class and walks every position. Both add in
// the same order, so they agree bit for bit.
template <class T, class G>
void encoder_backward(G* dwte,                // (V, C) +=
                      G* dwpe,                // (T, C) +=
                      const T* dout,          // (N, C)
                      const int32_t* tokens,  // (N)
                      int64_t B, int64_t T_, int64_t C, void* scratch, int64_t scratch_bytes,
                      cudaStream_t stream);

// out = (inp - mean) * rstd * weight + bias, per row; mean and rstd saved
// (fp32); eps is kLayerNormEps (1e-5).
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd,  // (N, C), (N), (N)
                       const T* inp,                      // (N, C)
                       const T* weight, const T* bias,    // (C), (C)
                       int64_t N, int64_t C, cudaStream_t stream);
// dinp = (accumulate ? dinp : 0) + d/dinp; dweight, dbias +=. dinp must not alias dout.
// scratch (scratch_floats device floats, or null) holds per-chunk sums of the
// parameter gradients: with room for 2 * C floats per chunk of
// kLayerNormParamRowsPerChunk rows the column sums spread over the whole GPU
// (chunks added in a fixed order); without, C / 32 blocks walk every row.
inline constexpr int64_t kLayerNormParamRowsPerChunk = 256;
template <class T, class G>
void layernorm_backward(T* dinp, G* dweight, G* dbias,         // (N, C), (C), (C)
                        const T* dout, const T* inp,           // (N, C), (N, C)
                        const T* weight,                       // (C)
                        const float* mean, const float* rstd,  // (N), (N)
                        int64_t N, int64_t C, bool accumulate, float* scratch,
                        int64_t scratch_floats, cudaStream_t stream);

// RMSNorm (llama), as runtime/cpu/kernels.h's: LayerNorm's kernels without the
// mean or bias (the same packed and scalar forms, the same chunked column
// sums with scratch for dweight). Rows are scaled by (weight_offset + weight):
// weight_offset 0, or 1 for Gemma's RMSNorm, whose weights start at 0; the
// forms without it take 0. out == nullptr: rstd only.
template <class T>
void rmsnorm_forward(T* out, float* rstd,            // (N, C), (N)
                     const T* inp, const T* weight,  // (N, C), (C)
                     int64_t N, int64_t C, float eps, float weight_offset, cudaStream_t stream);
template <class T, class G>
void rmsnorm_backward(T* dinp, G* dweight,          // (N, C), (C)
                      const T* dout, const T* inp,  // (N, C), (N, C)
                      const T* weight,              // (C)
                      const float* rstd,            // (N)
                      int64_t N, int64_t C, bool accumulate, float weight_offset, float* scratch,
                      int64_t scratch_floats, cudaStream_t stream);
template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                     float eps, cudaStream_t stream) {
  rmsnorm_forward(out, rstd, inp, weight, N, C, eps, 0.0f, stream);
}
template <class T, class G>
void rmsnorm_backward(T* dinp, G* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, int64_t N, int64_t C, bool accumulate, float* scratch,
                      int64_t scratch_floats, cudaStream_t stream) {
  rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, accumulate, 0.0f, scratch,
                   scratch_floats, stream);
}

// SwiGLU (llama's MLP), elementwise over n values: out = silu(gate) * up.
template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n, cudaStream_t stream);
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                     cudaStream_t stream);
// GeGLU (Gemma's MLP), elementwise over n values: out = gelu(gate) * up, GELU's tanh form.
template <class T>
void geglu_forward(T* out, const T* gate, const T* up, int64_t n, cudaStream_t stream);
template <class T>
void geglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                    cudaStream_t stream);
// x *= scale over n values (Gemma's embedding scale; runtime/cpu/llama.cpp's twin).
template <class T>
void scale_in_place(T* x, float scale, int64_t n, cudaStream_t stream);

// Rotary positions in place, as runtime/rope.h's: x (N, heads * D), row n at
// position n % T; cos and sin the plan's device tables (T, D / 2).
template <class T>
void rope_forward(T* x, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                  int64_t D, cudaStream_t stream);
template <class T>
void rope_backward(T* dx, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                   int64_t D, cudaStream_t stream);

// GELU, tanh approximation, elementwise over n values. Both may run in place
// (out == inp; dinp == dout).
template <class T>
void gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t stream);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream);

// out = a + b over n values (out may alias a or b).
template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream);

// Softmax cross-entropy fused with its gradient, one block per row, over
// the V true columns of rows Vp >= V wide (the padded vocabulary), as the
// CPU's cross_entropy_fused: losses[i] = -log softmax(logits[i][0, V))[targets[i]]
// (fp32); logits[i][0, V) are overwritten by dloss_scale * (softmax -
// onehot(targets[i])) and the padded columns [V, Vp) by zero. A softcap X > 0
// (Gemma 2's final_logit_softcapping) makes each logit c = X tanh(l / X),
// rounded to T, before the softmax, and multiplies its gradient by 1 - (c /
// X)^2, as the CPU's does (0: none).
template <class T>
void cross_entropy_fused(T* logits,               // (N, Vp) in: logits, out: dlogits
                         float* losses,           // (N)
                         const int32_t* targets,  // (N)
                         int64_t N, int64_t V, int64_t Vp, float dloss_scale, float softcap,
                         cudaStream_t stream);
// The same with dloss_scale read from device memory (one float) when the
// kernel runs, so that a step captured as a CUDA graph replays with each
// step's value (e.g. &gpu_step_scalars::dloss_scale).
template <class T>
void cross_entropy_fused(T* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                         int64_t Vp, const float* dloss_scale, float softcap, cudaStream_t stream);

// AdamW on master[begin, end) (fp32) from grad (dtype g, indexed like master),
// m and v the state: optimizer_adamw's rule, bias corrections computed on the
// host as there. decay says whether weight decay applies; t is the 1-based step.
void optimizer_adamw(float* master, float* m, float* v, const void* grad, dtype_id g, int64_t begin,
                     int64_t end, float lr, float beta1, float beta2, float eps, float weight_decay,
                     bool decay, int64_t t, float grad_scale, cudaStream_t stream);

// Scratch (device floats) cuda_sum_squares needs: one partial sum per block.
inline constexpr int64_t kSumSquaresScratchFloats = 1024;
// *sum += sum of x[i]^2 over n values of dtype t (the gradient norm's partial,
// as step_add_grad_norm); sum is one device float, scratch
// kSumSquaresScratchFloats device floats. Blocks sum in fp32, then one block
// sums their partials in a fixed order.
void cuda_sum_squares(float* sum, float* scratch, const void* x, dtype_id t, int64_t n,
                      cudaStream_t stream);
