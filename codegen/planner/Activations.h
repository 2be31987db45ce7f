// Activations: the bytes each segment's forward saves for its backward, per
// micro-batch, and the scratch backward needs, totalled from the family's
// layout tables (runtime/model/gpt2.h, runtime/model/llama.h), which the runtime's kernels
// carve: the planned peak is the measured one. Attention either saves its
// probabilities (H*T per token) or, with flash, their log-sum-exp (H, fp32).
// recompute = block: a block segment saves only its input (C per token) and
// rebuilds the rest into recompute scratch before its backward. The logits
// (N*V*a, with the loss per token in fp32) are their own buffer; their
// gradient overwrites them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/planner/Lower.h"
#include "runtime/model/layout.h"

namespace fsdpgen {

// A layout table (runtime/model/layout.h) that owns its rows: a block's saved arrays
// or the backward scratch of a model with custom layers (DESIGN §9), its
// family's rows less those the pieces a custom layer replaces write (but
// the layer's output row), then each custom layer's members, named
// "<module>.<member>" (an added layer's input first, "<module>.x"); the
// scratch also gets "custom_out", (N, C): where a custom layer writes what
// is not kept (a recompute's block output, a d(input) added to dres).
// Move-only: the rows point at the names.
class LayoutTable {
 public:
  LayoutTable() = default;
  explicit LayoutTable(model::Table<model::Field> family) : family_(family) {}
  LayoutTable(LayoutTable&&) = default;
  LayoutTable& operator=(LayoutTable&&) = default;
  LayoutTable(const LayoutTable&) = delete;
  LayoutTable& operator=(const LayoutTable&) = delete;
  void add(const model::Field& f) { rows_.push_back(f); }
  void add(std::string name, model::Elem elem, int64_t per_token);
  model::Table<model::Field> table() const;

 private:
  model::Table<model::Field> family_;  // used as it is while no row is added
  std::vector<std::unique_ptr<std::string>> names_;
  std::vector<model::Field> rows_;
};

struct ActivationShape {
  int64_t tokens = 0;     // N = micro_batch * context
  int64_t act_bytes = 4;  // a
  bool flash_attention = false;
};

// With ModelSpec::custom_red_zones, each custom array's row is followed by
// one of this many elements per token named "<module>.<member>.red_zone".
inline constexpr int64_t kCustomRedZonePerToken = 16;
std::string custom_red_zone_row(const std::string& module, const std::string& member);

// The dimensions the layout tables are written in.
model::Dims layout_dims(const ModelSpec& m, const ActivationShape& a);

// The arrays a block saves, and the backward scratch, of this model.
LayoutTable block_saved_layout(const ModelSpec& m);
LayoutTable backward_scratch_layout(const ModelSpec& m);

// Bytes one layer's forward saves; a segment saves its layers' slots in
// order. A split block's slot is its first piece's; the other pieces save
// into it and count nothing.
int64_t layer_saved_bytes(const ModelSpec& m, const LayerId& l, const ActivationShape& a);
// Bytes a group of segments (Segment::group) saves: its segments' in order.
int64_t group_saved_bytes(const Units& u, int g, const ActivationShape& a);
// Where the named array (a row of the layer's table, e.g. "input") starts in
// its slot; a name the table lacks is a logic error.
int64_t saved_field_offset_bytes(const ModelSpec& m, const LayerId& l, const ActivationShape& a,
                                 const char* field);
// Bytes a segment's forward saves (all of it; see recompute_saved_bytes).
int64_t segment_saved_bytes(const ModelSpec& m, const Segment& s, const ActivationShape& a);
// Bytes a block segment saves under recompute = block (its input only).
int64_t segment_input_bytes(const ModelSpec& m, const ActivationShape& a);
// Logits (rows of the padded vocabulary's width, param dtype) and then the
// per-token losses (fp32, from losses_offset_bytes) of one micro-batch.
int64_t logits_bytes(const ModelSpec& m, const ActivationShape& a);
int64_t losses_offset_bytes(const ModelSpec& m, const ActivationShape& a);
// Token ids and then targets (int32 each, targets from targets_offset_bytes)
// of one micro-batch.
int64_t inputs_bytes(const ActivationShape& a);
int64_t targets_offset_bytes(const ActivationShape& a);
// Gradient buffers flowing through backward (the family's backward scratch table).
int64_t backward_scratch_bytes(const ModelSpec& m, const ActivationShape& a);
// The rotary position tables (llama): cos then sin of each position's angle
// per frequency, (context, head_dim / 2) fp32 each, computed once at start;
// 0 for families without rotary positions.
int64_t rope_tables_bytes(const ModelSpec& m);

// Workspace cuDNN's fused attention (runtime/cuda/cudnn_attention.h) asks
// for on GPU plans with flash attention in 16-bit params: its backward's
// fp32 dQ accumulator (hs per head and token: C per token) and fp32 softmax
// sum dO.O (H per token), as cudnn_frontend's SDPA backward node sizes them,
// plus kCudnnAttentionEngineSlackBytes for scratch of cuDNN's engines
// themselves (256 bytes seen on an H100); for llama's grouped-query attention
// (fewer key/value heads than query heads) also dK and dV expanded to every
// query head in the params' dtype before their reduction to the key/value
// heads (the node's dK_fullhead and dV_fullhead: 2 C per token). On an H100
// (2026-11-26) cuDNN 9 asked for exactly these arrays and 256 bytes more at
// llama-1b's B=4 T=2048 H=32 KV=8 bf16: 135,266,560 bytes. The plan's
// workspace buffer ("gemm_workspace", Schedule.h) is the larger of this and
// cuBLASLt's share: cuBLASLt and cuDNN use it in turn on the compute stream.
// The runtime checks cuDNN's own request against the buffer at start and
// stops, naming both sizes, if it is larger.
inline constexpr int64_t kCudnnAttentionEngineSlackBytes = int64_t{1} << 20;
int64_t cudnn_attention_workspace_bytes(const ModelSpec& m, const ActivationShape& a);

// The most bytes a plan's activations may take: one micro-batch's saved
// arrays (every layer's), logits, backward scratch and inputs, times the
// micro-batches accumulated. Below it every byte count the planner adds up
// stays far from int64 overflow (custom layers keep to layers/LayerDecl.h's
// kMaxLayerElems per token).
inline constexpr int64_t kMaxActivationBytes = int64_t{1} << 60;

// Why `spec`'s activations cannot be planned: their bytes past
// kMaxActivationBytes, with the keys that set the tokens
// (train.micro_batch, model.context); "" when they fit. Sized per token
// and scaled in floating point, so it cannot overflow itself.
std::string activations_size_error(const Spec& spec, bool flash_attention);

}  // namespace fsdpgen
