// Layers: tensor catalogues of the gpt2 and llama families.
#include "dsl/Layers.h"

#include <fmt/format.h>

#include "model/gpt2.h"
#include "model/llama.h"

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
      return fmt::format("block {}", l.block);
    case LayerId::Kind::FinalNorm:
      return "final_norm";
    case LayerId::Kind::Head:
      return "head";
  }
  return "?";
}

model::Dims model_dims(const ModelSpec& m) {
  return {m.width, m.ffn_hidden, m.heads, m.context, m.kv_heads * m.head_dim()};
}

namespace {

// A block's tensors as its family's layout table lists them.
std::vector<TensorDecl> block_tensors(const ModelSpec& m, model::Table<model::Tensor> table,
                                      const std::string& prefix) {
  std::vector<TensorDecl> out;
  for (const model::Tensor& t : table) {
    std::vector<int64_t> shape;
    for (int i = 0; i < t.shape.rank; ++i)
      shape.push_back(t.shape.dims[i](model_dims(m)));
    out.push_back({prefix + t.hf_name, shape});
  }
  return out;
}

std::vector<TensorDecl> gpt2_tensors(const ModelSpec& m, const LayerId& layer) {
  const int64_t C = m.width, V = m.vocab, T = m.context;
  switch (layer.kind) {
    case LayerId::Kind::Embed:
      return {{"transformer.wte.weight", {V, C}, true}, {"transformer.wpe.weight", {T, C}}};
    case LayerId::Kind::Block:
      return block_tensors(m, model::kGpt2BlockParams,
                           fmt::format("transformer.h.{}.", layer.block));
    case LayerId::Kind::FinalNorm:
      return {{"transformer.ln_f.weight", {C}}, {"transformer.ln_f.bias", {C}}};
    case LayerId::Kind::Head:
      if (m.tie_embeddings) return {};
      return {{"lm_head.weight", {V, C}, true}};
  }
  return {};
}

std::vector<TensorDecl> llama_tensors(const ModelSpec& m, const LayerId& layer) {
  const int64_t C = m.width, V = m.vocab;
  switch (layer.kind) {
    case LayerId::Kind::Embed:
      return {{"model.embed_tokens.weight", {V, C}, true}};
    case LayerId::Kind::Block:
      return block_tensors(m, model::kLlamaBlockParams,
                           fmt::format("model.layers.{}.", layer.block));
    case LayerId::Kind::FinalNorm:
      return {{"model.norm.weight", {C}}};
    case LayerId::Kind::Head:
      if (m.tie_embeddings) return {};
      return {{"lm_head.weight", {V, C}, true}};
  }
  return {};
}

}  // namespace

std::vector<TensorDecl> layer_tensors(const ModelSpec& m, const LayerId& layer) {
  return m.family == Family::Gpt2 ? gpt2_tensors(m, layer) : llama_tensors(m, layer);
}

int64_t layer_params(const ModelSpec& m, const LayerId& layer) {
  int64_t n = 0;
  for (const TensorDecl& t : layer_tensors(m, layer))
    n += t.elems();
  return n;
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
