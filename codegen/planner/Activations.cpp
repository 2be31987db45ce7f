// Activations: the bytes of activation buffers, saved slots and scratch
// totalled from the families' layout tables.
#include "codegen/planner/Activations.h"

#include <fmt/format.h>

#include "dsl/Layers.h"
#include "runtime/model/gpt2.h"
#include "runtime/model/llama.h"

namespace fsdpgen {
namespace {

const model::ActivationLayout& activation_layout(const ModelSpec& m) {
  return m.family == Family::Gpt2 ? model::kGpt2Activations
                                  : model::llama_activations(llama_tables(m));
}

// Whether a custom layer replaces the piece that writes family row f, so
// the row is not kept (unless it is the layer's output, which it writes).
bool replaced_by_custom_layer(const ModelSpec& m, const model::Field& f) {
  for (const model::Module& x : param_layout(m).modules)
    if (f.piece >= x.first_piece && f.piece < x.end_piece && custom_layer(m, x.name) &&
        !(x.output && model::same_name(x.output, f.name)))
      return true;
  return false;
}

model::Elem elem_of(const CustomArraySpec& a) {
  return a.fp32 ? model::Elem::Fp32 : model::Elem::Param;
}

// The layer's saved arrays; none for the embedding and the head.
LayoutTable saved_layout(const ModelSpec& m, const LayerId& l) {
  switch (l.kind) {
    case LayerId::Kind::Block:
      return block_saved_layout(m);
    case LayerId::Kind::FinalNorm:
      return LayoutTable(activation_layout(m).final_norm);
    case LayerId::Kind::Embed:
    case LayerId::Kind::Head:
      break;
  }
  return {};
}

}  // namespace

void LayoutTable::add(std::string name, model::Elem elem, int64_t per_token) {
  names_.push_back(std::make_unique<std::string>(std::move(name)));
  rows_.push_back({names_.back()->c_str(), elem, model::Linear{per_token}});
}

model::Table<model::Field> LayoutTable::table() const {
  if (rows_.empty()) return family_;
  model::Table<model::Field> t;
  t.rows = rows_.data();
  t.count = rows_.size();
  return t;
}

LayoutTable block_saved_layout(const ModelSpec& m) {
  const model::Table<model::Field> family = activation_layout(m).block;
  if (m.custom.empty()) return LayoutTable(family);
  LayoutTable t;
  for (const model::Field& f : family)
    if (f.piece < 0 || !replaced_by_custom_layer(m, f)) t.add(f);
  for (const CustomLayerSpec& c : m.custom) {
    if (replaceable_module(m, c.module)->added())
      t.add(c.module + ".x", model::Elem::Param, m.width);  // its input, the block's output so far
    for (const CustomArraySpec& a : c.saved) {
      t.add(c.module + "." + a.name, elem_of(a), a.per_token);
      if (m.custom_red_zones)
        t.add(custom_red_zone_row(c.module, a.name), elem_of(a), kCustomRedZonePerToken);
    }
  }
  return t;
}

std::string custom_red_zone_row(const std::string& module, const std::string& member) {
  return module + "." + member + ".red_zone";
}

LayoutTable backward_scratch_layout(const ModelSpec& m) {
  const model::Table<model::Field> family = activation_layout(m).backward_scratch;
  if (m.custom.empty()) return LayoutTable(family);
  LayoutTable t;
  for (const model::Field& f : family)
    t.add(f);
  t.add("custom_out", model::Elem::Param, m.width);
  for (const CustomLayerSpec& c : m.custom)
    for (const CustomArraySpec& a : c.scratch) {
      t.add(c.module + "." + a.name, elem_of(a), a.per_token);
      if (m.custom_red_zones)
        t.add(custom_red_zone_row(c.module, a.name), elem_of(a), kCustomRedZonePerToken);
    }
  return t;
}

model::Dims layout_dims(const ModelSpec& m, const ActivationShape& a) {
  model::Dims d = model_dims(m);
  d.flash = a.flash_attention;
  return d;
}

int64_t layer_saved_bytes(const ModelSpec& m, const LayerId& l, const ActivationShape& a) {
  if (l.kind == LayerId::Kind::Block && l.piece > 0) return 0;  // in its first piece's slot
  return model::slot_bytes(saved_layout(m, l).table(), layout_dims(m, a), a.tokens, a.act_bytes);
}

int64_t group_saved_bytes(const Units& u, int g, const ActivationShape& a) {
  int64_t bytes = 0;
  for (int i : group_segments(u, g))
    bytes += segment_saved_bytes(u.spec.model, u.segments[static_cast<size_t>(i)], a);
  return bytes;
}

int64_t saved_field_offset_bytes(const ModelSpec& m, const LayerId& l, const ActivationShape& a,
                                 const char* field) {
  const LayoutTable layout = saved_layout(m, l);
  const model::Table<model::Field> t = layout.table();
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
  return model::slot_bytes(backward_scratch_layout(m).table(), layout_dims(m, a), a.tokens,
                           a.act_bytes);
}

int64_t rope_tables_bytes(const ModelSpec& m) {
  if (m.family != Family::Llama) return 0;
  const int64_t tables = m.rope_local_theta != 0 ? 2 : 1;  // the windowed layers' own base
  return tables * 2 * m.context * (m.head_dim() / 2) * 4;
}

int64_t cudnn_attention_workspace_bytes(const ModelSpec& m, const ActivationShape& a) {
  const bool grouped = m.family == Family::Llama && m.kv_heads < m.heads;
  const int64_t full_head_dk_dv = grouped ? 2 * m.width * a.act_bytes : 0;  // per token
  return a.tokens * (4 * (m.width + m.heads) + full_head_dk_dv) + kCudnnAttentionEngineSlackBytes;
}

std::string activations_size_error(const Spec& spec, bool flash_attention) {
  const ModelSpec& m = spec.model;
  const ActivationShape token{1, dtype_bytes(spec.parallel.precision.param), flash_attention};
  const LayerId block{LayerId::Kind::Block, 0, -1};
  const LayerId final_norm{LayerId::Kind::FinalNorm, 0, -1};
  const double per_token =
      static_cast<double>(layer_saved_bytes(m, block, token)) * static_cast<double>(m.layers) +
      static_cast<double>(layer_saved_bytes(m, final_norm, token) + logits_bytes(m, token) +
                          backward_scratch_bytes(m, token) + inputs_bytes(token));
  const int64_t tokens = spec.train.micro_batch * m.context;
  const double bytes = per_token * static_cast<double>(tokens) *
                       static_cast<double>(spec.parallel.accumulate.micro_batches);
  if (bytes <= static_cast<double>(kMaxActivationBytes)) return "";
  return fmt::format(
      "the activations of {} micro-batch{} of {} tokens (train.micro_batch {} x model.context {}) "
      "take {:.3g} bytes at {:.4g} bytes per token, past the planner's limit of 2^60 ({}): use a "
      "smaller micro_batch or context",
      spec.parallel.accumulate.micro_batches,
      spec.parallel.accumulate.micro_batches == 1 ? "" : "es", tokens, spec.train.micro_batch,
      m.context, bytes, per_token, kMaxActivationBytes);
}

}  // namespace fsdpgen
