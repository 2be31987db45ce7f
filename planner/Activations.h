// Activations: the bytes each segment's forward saves for its backward, per
// micro-batch, and the scratch backward needs. This is a contract with the
// runtime's kernels (which must save exactly this), so that the planned peak
// is the measured one. N = B*T tokens, a = bytes of the param dtype; norm
// statistics are fp32.
//   gpt2 block saves   input, ln1, qkv, attn_out, residual2, ln2 (8C)  + fc, gelu(fc) (2F)
//                      + ln1/ln2 mean and rstd (4 fp32) + attention (below)
//   llama block saves  input, rms1, q, k, v, attn_out, residual2, rms2 (6C + 2KV)
//                      + gate, up, silu(gate)*up (3F) + 2 rstd (fp32) + attention
//   attention          materialized: softmax probabilities (H*T per token, a bytes);
//                      flash: log-sum-exp (H per token, fp32)
//   final_norm saves   input and output (2C) + statistics;  embed: nothing
//   logits             N*V*a, with the loss per token (fp32); the gradient overwrites them
// recompute = block: a block segment saves only its input (C per token) and
// rebuilds the rest into recompute scratch before its backward.
#pragma once

#include <cstdint>

#include "planner/Lower.h"

namespace fsdpgen {

struct ActivationShape {
  int64_t tokens = 0;     // N = micro_batch * context
  int64_t act_bytes = 4;  // a
  bool flash_attention = false;
};

// Bytes one layer's forward saves; a segment saves its layers' slots in order.
int64_t layer_saved_bytes(const ModelSpec& m, const LayerId& l, const ActivationShape& a);
// Bytes a segment's forward saves (all of it; see recompute_saved_bytes).
int64_t segment_saved_bytes(const ModelSpec& m, const Segment& s, const ActivationShape& a);
// Bytes a block segment saves under recompute = block (its input only).
int64_t segment_input_bytes(const ModelSpec& m, const ActivationShape& a);
// Logits (rows of the padded vocabulary's width) and per-token loss of one micro-batch.
int64_t logits_bytes(const ModelSpec& m, const ActivationShape& a);
// Token ids and targets of one micro-batch (int32).
int64_t inputs_bytes(const ActivationShape& a);
// Gradient buffers flowing through backward: residual-stream gradient (2C,
// in and out) and the largest per-block intermediate gradient (with
// materialized attention including the probabilities' gradient, H*T); with
// flash attention then an fp32 rowsum(dO * O) per head and token (H), from the
// next 4-byte boundary.
int64_t backward_scratch_bytes(const ModelSpec& m, const ActivationShape& a);

// Workspace cuDNN's fused attention (runtime/cuda/cudnn_attention.h) asks
// for on GPU plans with flash attention in 16-bit params: its backward's
// fp32 dQ accumulator (hs per head and token: C per token) and fp32 softmax
// sum dO.O (H per token), as cudnn_frontend's SDPA backward node sizes them,
// plus kCudnnAttentionEngineSlackBytes for scratch of cuDNN's engines
// themselves (16 bytes seen on Hopper). The plan's workspace buffer
// ("gemm_workspace", Schedule.h) is the larger of this and cuBLASLt's share:
// cuBLASLt and cuDNN use it in turn on the compute stream. The runtime
// checks cuDNN's own request against the buffer at start and stops, naming
// both sizes, if it is larger.
inline constexpr int64_t kCudnnAttentionEngineSlackBytes = int64_t{1} << 20;
int64_t cudnn_attention_workspace_bytes(const ModelSpec& m, const ActivationShape& a);

}  // namespace fsdpgen
