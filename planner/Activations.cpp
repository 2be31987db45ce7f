// Activations: saved-tensor sizes of the gpt2 and llama layers.
#include "planner/Activations.h"

#include <algorithm>

namespace fsdpgen {
namespace {

int64_t attention_saved_per_token(const ModelSpec& m, const ActivationShape& a) {
  return a.flash_attention ? m.heads * 4 : m.heads * m.context * a.act_bytes;
}

int64_t layer_saved_per_token(const ModelSpec& m, const LayerId& l, const ActivationShape& a) {
  const int64_t C = m.width, F = m.ffn_hidden;
  switch (l.kind) {
    case LayerId::Kind::Embed:
      return 0;
    case LayerId::Kind::Block:
      if (m.family == Family::Gpt2)
        return (8 * C + 2 * F) * a.act_bytes + 4 * 4 + attention_saved_per_token(m, a);
      return (6 * C + 2 * m.kv_heads * m.head_dim() + 3 * F) * a.act_bytes + 2 * 4 +
             attention_saved_per_token(m, a);
    case LayerId::Kind::FinalNorm:
      return 2 * C * a.act_bytes + (m.family == Family::Gpt2 ? 8 : 4);
    case LayerId::Kind::Head:
      return 0;  // logits are their own buffer
  }
  return 0;
}

}  // namespace

int64_t layer_saved_bytes(const ModelSpec& m, const LayerId& l, const ActivationShape& a) {
  return layer_saved_per_token(m, l, a) * a.tokens;
}

int64_t segment_saved_bytes(const ModelSpec& m, const Segment& s, const ActivationShape& a) {
  int64_t per_token = 0;
  for (const LayerId& l : s.layers)
    per_token += layer_saved_per_token(m, l, a);
  return per_token * a.tokens;
}

int64_t segment_input_bytes(const ModelSpec& m, const ActivationShape& a) {
  return m.width * a.act_bytes * a.tokens;
}

int64_t logits_bytes(const ModelSpec& m, const ActivationShape& a) {
  return (m.padded_vocab() * a.act_bytes + 4) * a.tokens;
}

int64_t inputs_bytes(const ActivationShape& a) {
  return 2 * 4 * a.tokens;
}

int64_t backward_scratch_bytes(const ModelSpec& m, const ActivationShape& a) {
  const int64_t C = m.width, F = m.ffn_hidden;
  int64_t attention = a.flash_attention ? 0 : m.heads * m.context;
  int64_t largest = std::max({3 * C + attention, (m.family == Family::Gpt2 ? 2 : 3) * F,
                              C + 2 * m.kv_heads * m.head_dim()});
  const int64_t stored = (2 * C + largest) * a.act_bytes * a.tokens;
  if (!a.flash_attention) return stored;
  // Flash backward's fp32 rowsum(dO * O) per head and token, from a 4-byte boundary.
  return (stored + 3) / 4 * 4 + m.heads * 4 * a.tokens;
}

int64_t cudnn_attention_workspace_bytes(const ModelSpec& m, const ActivationShape& a) {
  return 4 * a.tokens * (m.width + m.heads) + kCudnnAttentionEngineSlackBytes;
}

}  // namespace fsdpgen
