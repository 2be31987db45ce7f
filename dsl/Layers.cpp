// Layers: tensor catalogues of the gpt2 and llama families.
#include "dsl/Layers.h"

#include <fmt/format.h>

#include "runtime/model/gpt2.h"
#include "runtime/model/llama.h"

namespace fsdpgen {

int64_t TensorDecl::elems() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t TensorDecl::stored_elems(const ModelSpec& m) const {
  return vocab_rows ? elems() / shape[0] * m.padded_vocab() : elems();
}

std::string to_string(const LayerId& l) {
  switch (l.kind) {
    case LayerId::Kind::Embed:
      return "embed";
    case LayerId::Kind::Block:
      return l.whole() ? fmt::format("block {}", l.block)
                       : fmt::format("block {} piece {}", l.block, l.piece);
    case LayerId::Kind::FinalNorm:
      return "final_norm";
    case LayerId::Kind::Head:
      return "head";
  }
  return "?";
}

model::Dims model_dims(const ModelSpec& m) {
  model::Dims d{m.width, m.ffn_hidden, m.heads, m.context, m.kv_heads * m.head_dim()};
  d.V = m.vocab;
  d.D = m.head_dim();
  return d;
}

namespace {

// A layer's tensors as its family's table lists them, each name after `prefix`.
std::vector<TensorDecl> table_tensors(const ModelSpec& m, model::Table<model::Tensor> table,
                                      const std::string& prefix) {
  std::vector<TensorDecl> out;
  for (const model::Tensor& t : table) {
    std::vector<int64_t> shape;
    for (int i = 0; i < t.shape.rank; ++i)
      shape.push_back(t.shape.dims[i](model_dims(m)));
    out.push_back({prefix + t.hf_name, shape, t.vocab_rows});
  }
  return out;
}

}  // namespace

model::LlamaTables llama_tables(const ModelSpec& m) {
  return {m.qkv_bias, m.qk_norm, m.qk_norm_across_heads, m.post_norm(), m.sandwich_norm()};
}

const model::ParamLayout& param_layout(const ModelSpec& m) {
  return m.family == Family::Gpt2 ? model::kGpt2Params : model::llama_params(llama_tables(m));
}

namespace {

// A block's tensors, each name after `prefix`: its family's table, a custom
// layer's members (named after its module) in place of the pieces it replaces.
std::vector<TensorDecl> block_tensors(const ModelSpec& m, const std::string& prefix) {
  const model::ParamLayout& p = param_layout(m);
  if (m.custom.empty()) return table_tensors(m, p.block, prefix);
  std::vector<TensorDecl> out;
  for (const BlockPiece& piece : model_block_pieces(m)) {
    if (piece.custom >= 0) {
      const CustomLayerSpec& c = m.custom[static_cast<size_t>(piece.custom)];
      for (const CustomTensorSpec& t : c.params)
        out.push_back({prefix + c.module + "." + t.name, t.shape, false});
      continue;
    }
    const model::Piece& fp = p.pieces[static_cast<size_t>(piece.family_first)];
    model::Table<model::Tensor> rows;
    rows.rows = p.block.rows + fp.first_tensor;
    rows.count = static_cast<size_t>(fp.tensors);
    for (TensorDecl& t : table_tensors(m, rows, prefix))
      out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

std::vector<TensorDecl> layer_tensors(const ModelSpec& m, const LayerId& layer) {
  const model::ParamLayout& p = param_layout(m);
  switch (layer.kind) {
    case LayerId::Kind::Embed:
      return table_tensors(m, p.embed, "");
    case LayerId::Kind::Block: {
      std::vector<TensorDecl> all =
          block_tensors(m, fmt::format(fmt::runtime(p.block_prefix), layer.block));
      if (layer.whole()) return all;
      const BlockPiece piece = block_piece(m, layer.piece);
      return {all.begin() + piece.first_tensor, all.begin() + piece.first_tensor + piece.tensors};
    }
    case LayerId::Kind::FinalNorm:
      return table_tensors(m, p.final_norm, "");
    case LayerId::Kind::Head:
      if (m.tie_embeddings) return {};  // the head reads the embedding's tensor
      return table_tensors(m, p.head, "");
  }
  return {};
}

int64_t layer_params(const ModelSpec& m, const LayerId& layer) {
  int64_t n = 0;
  for (const TensorDecl& t : layer_tensors(m, layer))
    n += t.elems();
  return n;
}

const model::Module* replaceable_module(const ModelSpec& m, std::string_view name) {
  for (const model::Module& x : param_layout(m).modules)
    if (name == x.name) return &x;
  return nullptr;
}

const CustomLayerSpec* custom_layer(const ModelSpec& m, std::string_view module) {
  for (const CustomLayerSpec& c : m.custom)
    if (c.module == module) return &c;
  return nullptr;
}

namespace {

// A custom layer's piece, in place of `module`'s family pieces (or added).
BlockPiece custom_piece(const ModelSpec& m, const model::Module& module) {
  const CustomLayerSpec& c = *custom_layer(m, module.name);
  BlockPiece b;
  b.name = c.module;
  b.tensors = static_cast<int>(c.params.size());
  b.family_first = module.first_piece;
  b.family_end = module.end_piece;
  b.custom = static_cast<int>(&c - m.custom.data());
  for (const CustomTensorSpec& t : c.params)
    b.linear |= t.shape.size() == 2;
  b.forward_flops_per_token = static_cast<double>(c.flops_per_token);
  return b;
}

}  // namespace

std::vector<BlockPiece> model_block_pieces(const ModelSpec& m) {
  const model::ParamLayout& p = param_layout(m);
  const model::Dims d = model_dims(m);
  std::vector<BlockPiece> out;
  int tensor = 0;
  auto push = [&](BlockPiece b) {
    b.first_tensor = tensor;
    tensor += b.tensors;
    out.push_back(std::move(b));
  };
  const int pieces = static_cast<int>(p.pieces.count);
  for (int i = 0; i <= pieces;) {
    const model::Module* replaced = nullptr;
    for (const model::Module& x : p.modules)
      if (x.first_piece == i && custom_layer(m, x.name)) {
        if (x.added())
          push(custom_piece(m, x));
        else
          replaced = &x;
      }
    if (i == pieces) break;
    if (replaced) {
      push(custom_piece(m, *replaced));
      i = replaced->end_piece;
      continue;
    }
    const model::Piece& fp = p.pieces[static_cast<size_t>(i)];
    BlockPiece b;
    b.name = fp.name;
    b.tensors = fp.tensors;
    b.family_first = i;
    b.family_end = i + 1;
    b.attention = fp.attention;
    b.linear = fp.linear();
    b.forward_flops_per_token =
        2.0 * static_cast<double>(fp.in(d)) * static_cast<double>(fp.out(d));
    push(std::move(b));
    ++i;
  }
  return out;
}

int block_piece_count(const ModelSpec& m) {
  return static_cast<int>(model_block_pieces(m).size());
}

BlockPiece block_piece(const ModelSpec& m, int piece) {
  return model_block_pieces(m).at(static_cast<size_t>(piece));
}

std::vector<int> pieces_named(const ModelSpec& m, std::string_view name) {
  std::vector<int> out;
  const std::vector<BlockPiece> pieces = model_block_pieces(m);
  for (int i = 0; i < static_cast<int>(pieces.size()); ++i) {
    const std::string_view p = pieces[static_cast<size_t>(i)].name;
    if (p == name ||
        (p.size() > name.size() && p.substr(0, name.size()) == name && p[name.size()] == '.'))
      out.push_back(i);
  }
  return out;
}

std::vector<LayerId> block_pieces(const ModelSpec& m, int64_t block) {
  std::vector<LayerId> out;
  for (int i = 0; i < block_piece_count(m); ++i)
    out.push_back({LayerId::Kind::Block, block, i});
  return out;
}

bool writes_block_output(const ModelSpec& m, const LayerId& l) {
  return l.kind == LayerId::Kind::Block && (l.whole() || l.piece == block_piece_count(m) - 1);
}

namespace {

// Whether family piece `piece`'s forward writes a saved row (the family's
// Field::piece, runtime/model/*.h): Gemma's down_proj writes the MLP's output
// before the norm after it, which its backward reads.
bool family_piece_saves(const ModelSpec& m, int piece) {
  const model::ActivationLayout& a = m.family == Family::Gpt2
                                         ? model::kGpt2Activations
                                         : model::llama_activations(llama_tables(m));
  for (const model::Field& f : a.block)
    if (f.piece == piece) return true;
  return false;
}

}  // namespace

bool writes_only_block_output(const ModelSpec& m, const LayerId& l) {
  if (!writes_block_output(m, l) || l.whole()) return false;
  const BlockPiece p = block_piece(m, l.piece);
  if (p.custom >= 0) return m.custom[static_cast<size_t>(p.custom)].saved.empty();
  for (int f = p.family_first; f < p.family_end; ++f)
    if (family_piece_saves(m, f)) return false;
  return true;
}

std::string layer_name(const ModelSpec& m, const LayerId& l) {
  if (l.kind == LayerId::Kind::Block && !l.whole())
    return fmt::format("block {}.{}", l.block, block_piece(m, l.piece).name);
  return to_string(l);
}

std::vector<LayerId> all_layers(const ModelSpec& m) {
  std::vector<LayerId> out;
  out.push_back({LayerId::Kind::Embed, 0});
  for (int64_t i = 0; i < m.layers; ++i)
    out.push_back({LayerId::Kind::Block, i});
  out.push_back({LayerId::Kind::FinalNorm, 0});
  out.push_back({LayerId::Kind::Head, 0});
  return out;
}

int64_t model_params(const ModelSpec& m) {
  int64_t n = 0;
  for (const LayerId& l : all_layers(m))
    n += layer_params(m, l);
  return n;
}

}  // namespace fsdpgen
