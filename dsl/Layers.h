// Layers: the tensors of every layer of each model family, with their Hugging
// Face names and shapes. gpt2 uses GPT-2's Conv1D layout (weight is
// (in, out)); llama uses nn.Linear layout (weight is (out, in)). A tied head
// owns no tensor: it reads the token embedding.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/Spec.h"
#include "runtime/model/layout.h"
#include "runtime/model/llama.h"

namespace fsdpgen {

struct TensorDecl {
  std::string name;            // e.g. transformer.h.3.attn.c_attn.weight
  std::vector<int64_t> shape;  // row-major
  bool vocab_rows = false;     // one row per token: stored with ModelSpec::padded_vocab() rows
  int64_t elems() const;
  // Elements it occupies in a flat parameter: elems() and, with vocab_rows,
  // the zero rows that pad the vocabulary, which follow the true rows.
  int64_t stored_elems(const ModelSpec& m) const;
};

// The model's dimensions as the layout tables (runtime/model/layout.h) write them;
// attention's layout (flash) is the plan's, not the model's.
model::Dims model_dims(const ModelSpec& m);
// The family's parameter tables (runtime/model/gpt2.h, runtime/model/llama.h;
// llama's with q, k and v biases where qkv_bias).
const model::ParamLayout& param_layout(const ModelSpec& m);
// The llama options that choose llama's tables (runtime/model/llama.h).
model::LlamaTables llama_tables(const ModelSpec& m);

// Tensors of one layer, in their fixed flat-parameter order (a block's from
// its family's layout table, runtime/model/gpt2.h and runtime/model/llama.h; a piece's are
// its rows of that table).
std::vector<TensorDecl> layer_tensors(const ModelSpec& m, const LayerId& layer);

// A piece of a model's block (LayerId::piece indexes these): one of its
// family's pieces (runtime/model/layout.h's Piece), or a custom layer (ModelSpec::
// custom) in place of the family pieces of the module it replaces, or added
// (runtime/model/layout.h's Module). A model without custom layers has its family's
// pieces.
struct BlockPiece {
  std::string name;                      // "attn.c_attn"; a custom layer's module: "mlp"
  int first_tensor = 0, tensors = 0;     // its rows of the block's tensors (layer_tensors)
  int family_first = 0, family_end = 0;  // the family pieces it runs or stands for
  int custom = -1;                       // ModelSpec::custom's index, or -1
  bool attention = false;                // the attention core runs with it
  bool linear = false;                   // a weight matrix: `each linear` gives it a unit
  double forward_flops_per_token = 0;    // its matrices' (2 per multiply-add) or the layer's Flops
};
std::vector<BlockPiece> model_block_pieces(const ModelSpec& m);
// How many pieces a block has, one of them, and the pieces a spec's name
// selects: the piece of that name, or every piece under that module (gpt2's
// "attn" is attn.c_attn and attn.c_proj).
int block_piece_count(const ModelSpec& m);
BlockPiece block_piece(const ModelSpec& m, int piece);
std::vector<int> pieces_named(const ModelSpec& m, std::string_view name);
// The pieces of block `block` in forward order.
std::vector<LayerId> block_pieces(const ModelSpec& m, int64_t block);
// The custom layer in place of `module` (ModelSpec::custom), or null.
const CustomLayerSpec* custom_layer(const ModelSpec& m, std::string_view module);
// The family module named `name` a custom layer can replace or be added as, or null.
const model::Module* replaceable_module(const ModelSpec& m, std::string_view name);
// Whether a block layer's forward writes the block's output: a whole block,
// or its last piece (gpt2's mlp.c_proj, llama's mlp.down_proj).
bool writes_block_output(const ModelSpec& m, const LayerId& l);
// Whether a piece's forward writes nothing but the block's output, so that a
// recompute can skip it: the family's last piece unless the family's saved
// rows name it (Gemma's down_proj saves the MLP's output before its norm),
// or a custom layer's that saves no arrays for its backward.
bool writes_only_block_output(const ModelSpec& m, const LayerId& l);
// "embed", "block 3", "block 3.attn.c_attn": as a spec writes it.
std::string layer_name(const ModelSpec& m, const LayerId& l);

// Parameter count of one layer (sum of its tensors' elements).
int64_t layer_params(const ModelSpec& m, const LayerId& layer);

// Every layer in forward order: embed, block 0..L-1, final_norm, head.
std::vector<LayerId> all_layers(const ModelSpec& m);

// Total parameters of the model (tied weights counted once).
int64_t model_params(const ModelSpec& m);

}  // namespace fsdpgen
