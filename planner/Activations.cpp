// Activations: the bytes of activation buffers, saved slots and scratch
// totalled from the families' layout tables.
#include "planner/Activations.h"

#include "model/gpt2.h"
#include "model/llama.h"

namespace fsdpgen {
namespace {

const model::ActivationLayout& activation_layout(const ModelSpec& m) {
  return m.family == Family::Gpt2 ? model::kGpt2Activations : model::kLlamaActivations;
}

// The layer's saved arrays; none for the embedding and the head.
model::Table<model::Field> saved_table(const ModelSpec& m, const LayerId& l) {
  switch (l.kind) {
    case LayerId::Kind::Block:
      return activation_layout(m).block;
    case LayerId::Kind::FinalNorm:
      return activation_layout(m).final_norm;
    case LayerId::Kind::Embed:
    case LayerId::Kind::Head:
      break;
  }
  return {};
}

}  // namespace

model::Dims layout_dims(const ModelSpec& m, const ActivationShape& a) {
  model::Dims d = model_dims(m);
  d.flash = a.flash_attention;
  return d;
}

int64_t layer_saved_bytes(const ModelSpec& m, const LayerId& l, const ActivationShape& a) {
  if (l.kind == LayerId::Kind::Block && l.piece > 0) return 0;  // in its first piece's slot
  return model::slot_bytes(saved_table(m, l), layout_dims(m, a), a.tokens, a.act_bytes);
}

int64_t group_saved_bytes(const Units& u, int g, const ActivationShape& a) {
  int64_t bytes = 0;
  for (int i : group_segments(u, g))
    bytes += segment_saved_bytes(u.spec.model, u.segments[static_cast<size_t>(i)], a);
  return bytes;
}

int64_t saved_field_offset_bytes(const ModelSpec& m, const LayerId& l, const ActivationShape& a,
                                 const char* field) {
  const model::Table<model::Field> t = saved_table(m, l);
  return model::offset_bytes(t, model::index_of(t, field), layout_dims(m, a), a.tokens,
                             a.act_bytes);
}

int64_t segment_saved_bytes(const ModelSpec& m, const Segment& s, const ActivationShape& a) {
  int64_t bytes = 0;
  for (const LayerId& l : s.layers)
    bytes += layer_saved_bytes(m, l, a);
  return bytes;
}

int64_t segment_input_bytes(const ModelSpec& m, const ActivationShape& a) {
  return m.width * a.act_bytes * a.tokens;
}

int64_t losses_offset_bytes(const ModelSpec& m, const ActivationShape& a) {
  return m.padded_vocab() * a.act_bytes * a.tokens;
}

int64_t logits_bytes(const ModelSpec& m, const ActivationShape& a) {
  return losses_offset_bytes(m, a) + 4 * a.tokens;
}

int64_t targets_offset_bytes(const ActivationShape& a) {
  return 4 * a.tokens;
}

int64_t inputs_bytes(const ActivationShape& a) {
  return targets_offset_bytes(a) + 4 * a.tokens;
}

int64_t backward_scratch_bytes(const ModelSpec& m, const ActivationShape& a) {
  return model::slot_bytes(activation_layout(m).backward_scratch, layout_dims(m, a), a.tokens,
                           a.act_bytes);
}

int64_t rope_tables_bytes(const ModelSpec& m) {
  if (m.family != Family::Llama) return 0;
  return 2 * m.context * (m.head_dim() / 2) * 4;
}

int64_t cudnn_attention_workspace_bytes(const ModelSpec& m, const ActivationShape& a) {
  const int64_t grouped_kv =
      m.family == Family::Llama ? 2 * m.kv_heads * m.head_dim() : 0;  // fp32 dK and dV
  return 4 * a.tokens * (m.width + m.heads + grouped_kv) + kCudnnAttentionEngineSlackBytes;
}

}  // namespace fsdpgen
