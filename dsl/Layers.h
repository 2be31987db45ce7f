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
#include "model/layout.h"

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

// The model's dimensions as the layout tables (model/layout.h) write them;
// attention's layout (flash) is the plan's, not the model's.
model::Dims model_dims(const ModelSpec& m);
// The family's parameter tables (model/gpt2.h, model/llama.h).
const model::ParamLayout& param_layout(Family f);

// Tensors of one layer, in their fixed flat-parameter order (a block's from
// its family's layout table, model/gpt2.h and model/llama.h; a piece's are
// its rows of that table).
std::vector<TensorDecl> layer_tensors(const ModelSpec& m, const LayerId& layer);

// A block's pieces (model/layout.h's Piece): how many the family has, their
// names, and the pieces a spec's name selects: the piece of that name, or
// every piece under that module (gpt2's "attn" is attn.c_attn and attn.c_proj).
int block_piece_count(const ModelSpec& m);
const model::Piece& block_piece(const ModelSpec& m, int piece);
std::vector<int> pieces_named(const ModelSpec& m, std::string_view name);
// The pieces of block `block` in forward order.
std::vector<LayerId> block_pieces(const ModelSpec& m, int64_t block);
// Whether a block layer's forward writes the block's output: a whole block,
// or its last piece (gpt2's mlp.c_proj, llama's mlp.down_proj).
bool writes_block_output(const ModelSpec& m, const LayerId& l);
// "embed", "block 3", "block 3.attn.c_attn": as a spec writes it.
std::string layer_name(const ModelSpec& m, const LayerId& l);

// Parameter count of one layer (sum of its tensors' elements).
int64_t layer_params(const ModelSpec& m, const LayerId& layer);

// Every layer in forward order: embed, block 0..L-1, final_norm, head.
std::vector<LayerId> all_layers(const ModelSpec& m);

// Total parameters of the model (tied weights counted once).
int64_t model_params(const ModelSpec& m);

}  // namespace fsdpgen
