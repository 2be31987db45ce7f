// LayerArgs: what a layer's calls in a forward or backward op take, as
// named pointers into the arena: its parameters and gradients (carved from
// the family's layout, or set tensor by tensor), its slot of saved
// activations and where its input and output lie (the family's layout
// tables, runtime/model/gpt2.h and runtime/model/llama.h, which codegen/planner/Activations.h
// totals).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/emit/OpWriter.h"

namespace fsdpgen::emit {

// A tensor of the unit in its params buffer, or in its gradients.
At param(const EmitContext& c, int params_buf, int unit, const TensorAt& t);
At grad(const EmitContext& c, int grads_buf, int unit, const TensorAt& t);
int head_unit(const EmitContext& c, const Segment& seg);  // tied: the embedding's, the root
// Where the op's segment's layers save what backward reads: its saved
// activations, or under recompute = block the scratch.
int saved_of(const OpWriter& w);

// Declares a named pointer to each tensor of a table (embed, final norm),
// its rows resolved in `at`, in `buffer` (params, or grads as "d" + name)
// and returns them as arguments.
std::string table_args(const OpWriter& w, Body& b, model::Table<model::Tensor> table,
                       const std::vector<TensorAt>& at, int buffer, int unit, bool grads);

// Byte offset of each layer's slot in its group's saved layout (a
// segment's own, unless sub-block units split a block across segments:
// Segment::group), one more entry after the last: where the next slot
// would start. A later piece of a split block points at its first piece's slot.
std::vector<int64_t> slot_offsets(const EmitContext& c, const Segment& seg);
// Whether layer l (of a segment of this group) reads the group's input:
// it is, or is a piece of, the group's first block.
bool reads_group_input(const EmitContext& c, const Segment& seg, const LayerId& l);
// The run of pieces of one block from layer k of a segment: [k, end).
size_t piece_run_end(const Segment& seg, size_t k);
// Where a layer's saved input sits inside its slot. The head saves none:
// it reads the final norm's output, and forward writes nothing for it.
int64_t input_field(const EmitContext& c, const LayerId& l);
// Where segment i's first layer reads its input in the saved activations
// acts (its own slot, or the whole buffer under recompute).
At segment_input(const EmitContext& c, int seg_index, int acts);

// Each layer that writes code (final_norm is written with the head) gets
// its own scope when a segment has several.
bool writes_code(const LayerId& l);
bool scoped(const Segment& seg);
Body layer_body(bool scoped);
std::string close(const Body& b, bool scoped, const std::string& what);

// What one call of a block's forward or backward covers: a run of its
// family's pieces [family_first, family_end), or one custom layer (custom >= 0).
struct PieceCall {
  int family_first = 0, family_end = 0;
  int custom = -1;
};
// ", block_pieces{first, end}" for a run of family pieces, "" for a whole
// block of a model without custom layers.
std::string family_pieces_arg(const EmitContext& c, const Segment& seg, size_t k, size_t end,
                              const PieceCall& pc);
// The family's piece count (a block's output is written by its last).
int block_piece_count_family(const EmitContext& c);

// Where a block's (or a run of its pieces') calls find their buffers:
// params; in backward, grads; its slot of saved activations; the buffer it
// reads its input from when that is not in its slot (-1); in forward, where
// its output goes (no buffer: nowhere).
struct BlockBuffers {
  int params = -1;
  int grads = -1;
  At slot;
  int input = -1;
  At out;
};
// What a block's calls take, declared in `b` in the order the calls read
// them: `saved` (the family's struct over the slot, its input set),
// `params` (and in backward `grads`) and llama's rope tables.
struct BlockArgs {
  std::vector<PieceCall> calls;  // the family's runs and the custom layers, in forward order
  std::string out;               // the block output's pointer ("nullptr": none)
  std::string rope;              // rope_arg's
  std::string dims;              // the block's dims (EmitContext::block_dims)
};
BlockArgs block_args(const OpWriter& w, Body& b, size_t k, size_t end, const BlockBuffers& at,
                     bool backward);

}  // namespace fsdpgen::emit
