// EmitContext: what every room of the emitter reads of one program, built
// once from the plan: the schedule and memory plan, the target, the sizes
// the op bodies multiply by, and each custom layer's glue resolved (the
// module it stands in for, its rows' offsets), so that no room looks a row
// up by name. ProgramNotes is what the op bodies leave for the tables.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "codegen/emit/EmitTarget.h"
#include "codegen/planner/Activations.h"
#include "codegen/planner/Hardware.h"
#include "codegen/planner/Memory.h"
#include "codegen/planner/Schedule.h"
#include "dsl/Spec.h"
#include "runtime/model/layout.h"

namespace fsdpgen::emit {

// A parameter tensor, resolved once from its Hugging Face name: the unit
// that holds it and its row there (-1 and null: the model has none).
struct TensorAt {
  std::string name;
  int unit = -1;
  const FlatTensor* tensor = nullptr;
};

// A custom layer (ModelSpec::custom's entry, DESIGN §9) as its glue uses it:
// byte offsets in the block's saved slot and in the backward scratch
// (codegen/planner/Activations.h's block_saved_layout and backward_scratch_layout).
struct CustomGlue {
  // A red zone after an array (--check): from the array's end to the end of
  // its red_zone row, bytes from the array's base (the slot, or the scratch).
  struct Zone {
    int64_t begin = 0, bytes = 0;
  };
  const CustomLayerSpec* spec = nullptr;
  const model::Module* module = nullptr;         // the family module it stands in for
  std::string var;                               // its local: "layer_<module>"
  std::vector<std::vector<TensorAt>> params;     // [block][each of spec->params]
  std::vector<int64_t> saved_rows;               // each of spec->saved's, in the slot
  std::vector<int64_t> scratch_rows;             // each of spec->scratch's, in the scratch
  std::vector<Zone> saved_zones, scratch_zones;  // with custom red zones, else empty
  int64_t input_row = -1;  // an added layer's own input row ("<module>.x") in the slot
};

// A row of the block's saved struct that a model with custom layers sets
// one by one (the others are the custom layers' own, "<module>.<member>").
struct SavedRow {
  std::string name;
  int64_t bytes = 0;  // in the slot
  bool fp32 = false;
};

struct EmitContext {
  // Precondition: emit_program's (codegen/emit/Emit.h).
  EmitContext(const std::string& spec_path, const Schedule& schedule, const MemoryPlan& memory,
              const EmitTarget& target);

  std::string path;  // how the header and the binary name the spec
  const Schedule& s;
  const MemoryPlan& m;
  const Spec& spec;
  const ModelSpec& model;
  EmitTarget target;
  Hardware hardware;  // the built-in figures of target.hardware: the ops' predicted times
  bool cuda = false;
  bool comm = false;           // the step communicates (shard group or replicas above 1)
  int64_t pbytes = 4;          // a parameter's (and an activation's) bytes
  int64_t rbytes = 4;          // an unsharded gradient's
  int64_t N = 0;               // tokens in a micro-batch
  DType reduce = DType::FP32;  // the unsharded gradients' dtype (fp32 without communication)
  DType half = DType::BF16;    // the 16-bit dtype 16-bit buffers hold
  ActivationShape act;

  // The parameter tensors the op bodies point at: each block's rows of the
  // family's block table ([block][row]; a custom model lacks those its
  // layers replace), and the rows of the embed, final norm and head tables.
  std::vector<std::vector<TensorAt>> block_params;
  std::vector<TensorAt> embed_params, final_norm_params, head_params;
  // Custom layers: ModelSpec::custom's glue in its order, the added one's
  // index (-1: none), the saved rows set one by one, and the backward
  // scratch's custom_out row (where a layer writes what is not kept).
  std::vector<CustomGlue> custom;
  std::map<const FlatTensor*, const CustomTensorSpec*> custom_tensors;  // each one's declaration
  int added_custom = -1;
  std::vector<SavedRow> saved_rows;
  int64_t custom_out = 0;

  bool custom_model() const { return !model.custom.empty(); }
  const Buffer& buf(int id) const { return s.buffers[static_cast<size_t>(id)]; }
  int64_t offset(int id) const { return m.placements[static_cast<size_t>(id)].offset; }
  const FlatUnit& unit(int u) const { return s.units.units[static_cast<size_t>(u)]; }
  const Segment& segment(int i) const { return s.units.segments[static_cast<size_t>(i)]; }
  const Segment& segment(const Op& op) const { return segment(op.segment); }
  // Where tensor t starts in unit `unit`'s flat parameter (a logic error
  // if the unit does not hold it).
  int64_t offset_elems(const TensorAt& t, int unit) const;
  // The head's weight: the embedding's when tied.
  const TensorAt& head_weight() const {
    return model.tie_embeddings ? embed_params[0] : head_params[0];
  }
  // The family's runtime prefix ("gpt2": gpt2_block_forward, runtime/cpu/gpt2.h).
  std::string fam() const { return std::string(to_string(model.family)); }
  // The dims a block's calls take: kLocalDims for a local layer of
  // alternating ones (Gemma 2 and 3: model_dims writes both), else kDims.
  std::string block_dims(int64_t block) const {
    return model::local_layer(model.global_every, block) ? "kLocalDims" : "kDims";
  }
  const model::ParamLayout& layout() const { return param_layout(model); }
  // A block's tensor names' prefix ("transformer.h.3.").
  std::string block_prefix(int64_t block) const;
};

// What the op bodies leave for the tables and for the ops after them.
struct ProgramNotes {
  // Red zones after custom arrays (--check), as the op bodies bind them:
  // buffer, offset, bytes, the array's name.
  std::set<std::tuple<int, int64_t, int64_t, std::string>> inner_red_zones;
  std::set<int> zeroed;  // the gradient buffers a backward has zeroed
};

}  // namespace fsdpgen::emit
