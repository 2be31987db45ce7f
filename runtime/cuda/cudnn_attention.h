// cudnn_attention (CUDA): causal self-attention through cuDNN's fused SDPA
// (flash) graphs, built with the cuDNN frontend, in the flash layout of
// attention.h, and the choice between it and the hand-written kernels.
//
// Same buffers and contract as cuda_attention_forward_flash and
// cuda_attention_backward_flash: qkv (N, 3C) holds q | k | v, each split
// into H heads of hs = C/H (so Q as (B, H, T, hs) has strides (T*3C, hs, 3C,
// 1)); out (N, C); lse (B, H, T) fp32. cuDNN's softmax statistics ("Stats",
// cudnn_frontend's composite softmax: max + log(sum(exp(S - max))) over each
// query's causally masked (and windowed) scores S = scale q.k, the scale
// 1/sqrt(hs) unless the shape gives one, natural log, fp32, dims (B, H, T, 1)
// with strides (H*T, T, 1, 1)) are exactly lse: the plan's saved slot is
// unchanged and either backward reads either forward's lse. bf16 and fp16
// only (fp32 stays on the hand-written kernels).
//
// Graphs are built once per shape (cudnn_attention_shape) before the first
// step (gpu_attention_prepare) and only looked up when a step is issued (a
// model whose layers alternate, Gemma 2's and 3's, has two: the global
// layers' without the window, the local ones' with it); execution
// enqueues on g.stream, allocates no device memory and never synchronizes,
// so a step that runs it can be captured as a CUDA graph. Its workspace is
// the plan's workspace buffer (g.lt_workspace, shared with cuBLASLt: both run
// on the compute stream, one after the other). The backward sums dQ over key
// tiles with fp32 atomics in that workspace: unlike the hand-written
// kernels, results may differ in the last bits from run to run once T spans
// more than one key tile (FSDPGEN_ATTENTION=flash for bit-reproducible runs).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/attention_options.h"
#include "runtime/cuda/exec.h"
#include "runtime/dtype.h"
#include "runtime/limits.h"

// Whether this build has cuDNN attention (CMake found cuDNN, NVRTC and the
// frontend; FSDPGEN_CUDNN). Without it, gpu_attention_prepare throws.
bool cudnn_attention_built();

// Head sizes cuDNN's fused attention takes here: runtime/limits.h's
// kCudnnAttentionHeadSizeMultiple and kCudnnAttentionMaxHeadSize, which the
// planner plans with too; larger heads run on the flash kernels.

// Which kernels a program's attention runs on, and why (one line, for the
// run's header).
enum class attention_kernels { materialized, flash, cudnn };
struct attention_choice {
  attention_kernels kernels = attention_kernels::flash;
  std::string why;
};
// flash_plan: the plan saves lse (program_plan::flash_attention); param: its
// activations' dtype; forced: the FSDPGEN_ATTENTION variable (nullptr or ""
// or "auto": cuDNN where it applies, else the flash kernels; "flash": the
// hand-written kernels; "cudnn": cuDNN, or std::runtime_error saying why it
// cannot; anything else: std::runtime_error naming the variable).
// context: the sequence length (cuDNN refuses one key: s_q = s_kv = 1).
// attention_softcap: the model's (Gemma 2's; 0: none): cuDNN's SDPA takes a
// soft-cap only as a score modifier, which excludes its causal mask, so a
// soft-capped model runs on the flash kernels. A sliding window and another
// scale cuDNN takes (cudnn_attention_shape).
attention_choice choose_attention(bool flash_plan, dtype_id param, int64_t head_size,
                                  int64_t context, float attention_softcap, bool cudnn_built,
                                  const char* forced);

// One graph pair's shape; also the cache's key. C is the width of q and of
// the output, H * head_size() (gpt2's packed qkv rows are 3C wide).
struct cudnn_attention_shape {
  int64_t B = 0, T = 0, C = 0, H = 0;
  dtype_id dtype = dtype_id::bf16;
  // Key/value heads of grouped-query attention, q, k and v arrays of their
  // own (llama); 0: gpt2's packed qkv rows, every head.
  int64_t KV = 0;
  int64_t hs = 0;      // the head size; 0: C / H
  int64_t window = 0;  // attention_options' window (0: none; W >= T: none either)
  float scale = 0.0f;  // of q . k; 0: 1 / sqrt(head size)
  int64_t head_size() const { return hs != 0 ? hs : C / H; }
  // Keys compare the head size, not hs: {.., hs = C / H} and {.., hs = 0} are one.
  bool operator<(const cudnn_attention_shape& o) const;
  std::string name() const;  // "B=4 T=1024 C=768 H=12 bf16", then any hs, window, scale
};

// A cuDNN handle and the graphs built for it, per shape.
struct gpu_attention;
gpu_attention* gpu_attention_create();
void gpu_attention_destroy(gpu_attention* a);
// Builds (once) the forward and backward graphs of `shape` on the current
// device, checking cuDNN supports them; throws std::runtime_error naming
// the shape with cuDNN's message when it does not, or when either graph
// needs more workspace than workspace_bytes (naming both sizes).
void gpu_attention_prepare(gpu_attention& a, const cudnn_attention_shape& shape,
                           int64_t workspace_bytes);
// The workspace cuDNN asks for to run both of shape's graphs (the larger);
// shape must have been prepared (std::logic_error otherwise).
int64_t gpu_attention_workspace_bytes(const gpu_attention& a, const cudnn_attention_shape& shape);

// What cuda_attention_forward_flash computes, through g.attention's graphs
// for this shape (prepared before: std::logic_error otherwise), with
// g.lt_workspace as workspace. T is bf16 or fp16.
template <class T>
void cuda_cudnn_attention_forward(T* out,        // (N, C)
                                  float* lse,    // (B, H, T)
                                  const T* qkv,  // (N, 3C)
                                  int64_t B, int64_t T_, int64_t C, int64_t H, gpu_exec& g);
// dqkv (N, 3C) overwritten, from dout and the forward's out and lse.
template <class T>
void cuda_cudnn_attention_backward(T* dqkv,           // (N, 3C)
                                   const T* dout,     // (N, C)
                                   const T* qkv,      // (N, 3C)
                                   const T* out,      // (N, C)
                                   const float* lse,  // (B, H, T)
                                   int64_t B, int64_t T_, int64_t C, int64_t H, gpu_exec& g);

// Grouped-query attention (llama) through the graphs of shape {B, T, H * hs,
// H, dtype, KV_heads, hs, o.window, o.scale}: what cuda_attention_gqa_forward/backward
// compute, q (N, H*hs), k and v (N, KV_heads*hs) arrays of their own; cuDNN's
// SDPA takes fewer key/value heads natively (dk and dv summed over each
// group), the window as its sliding window (keys u with t - u < W, its
// diagonal band's left bound) and the scale as its attn_scale. o.softcap must
// be 0 (std::invalid_argument otherwise, before anything is enqueued:
// choose_attention picks the flash kernels for a soft-capped model).
template <class T>
void cuda_cudnn_attention_gqa_forward(T* out, float* lse, const T* q, const T* k, const T* v,
                                      int64_t B, int64_t T_, int64_t H, int64_t KV_heads,
                                      int64_t hs, gpu_exec& g, const attention_options& o = {});
template <class T>
void cuda_cudnn_attention_gqa_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                                       const T* v, const T* out, const float* lse, int64_t B,
                                       int64_t T_, int64_t H, int64_t KV_heads, int64_t hs,
                                       gpu_exec& g, const attention_options& o = {});
