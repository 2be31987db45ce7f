// llama: pointers into the saved-activation, parameter and scratch layouts of
// runtime/model/llama.h, and the rotary tables' halves, for both backends.
#include "runtime/llama.h"

#include <iterator>
#include <type_traits>

#include "runtime/dtype_pairs.h"
#include "runtime/layout_carver.h"
#include "runtime/model/llama.h"

namespace {

namespace model = fsdpgen::model;

static_assert(model::same_name(model::kLlamaBlockPieces[kLlamaV].name, "self_attn.v_proj") &&
                  model::same_name(model::kLlamaBlockPieces[kLlamaDown].name, "mlp.down_proj") &&
                  std::size(model::kLlamaBlockPieces) == kLlamaPieces,
              "llama_piece follows runtime/model/llama.h's kLlamaBlockPieces");

static_assert(model::same_name(model::kLlamaPostNormBlockPieces[kLlamaPostRms1].name,
                               "post_attention_layernorm") &&
                  std::size(model::kLlamaPostNormBlockPieces) == kLlamaPostPieces,
              "llama_post_piece follows runtime/model/llama.h's kLlamaPostNormBlockPieces");

model::LlamaTables tables(const llama_dims& d) {
  return {d.qkv_bias, d.qk_norm, d.qk_norm_across_heads, d.post_norm, d.sandwich_norm};
}

model::Dims layout_dims(const llama_dims& d) {
  return {d.C, d.F, d.H, d.T, d.KV(), d.flash, d.V, d.D()};
}

slot_carver llama_slot(model::Table<model::Field> table, const llama_dims& d, int64_t param_bytes,
                       std::byte* base) {
  return {table, layout_dims(d), d.N(), param_bytes, base};
}

// A block's tensors (params and grads alike).
template <class Out, class Ptr>
Out block_tensors_at(Ptr base, const llama_dims& d) {
  const tensor_carver<std::remove_pointer_t<Ptr>> c{model::llama_params(tables(d)).block,
                                                    layout_dims(d), base};
  Out p;
  p.rms1_w = c.at("rms1_w");
  p.q_w = c.at("q_w");
  p.k_w = c.at("k_w");
  p.v_w = c.at("v_w");
  p.q_b = d.qkv_bias ? c.at("q_b") : nullptr;
  p.k_b = d.qkv_bias ? c.at("k_b") : nullptr;
  p.v_b = d.qkv_bias ? c.at("v_b") : nullptr;
  p.q_norm_w = d.qk_norm ? c.at("q_norm_w") : nullptr;
  p.k_norm_w = d.qk_norm ? c.at("k_norm_w") : nullptr;
  p.o_w = c.at("o_w");
  p.rms2_w = c.at("rms2_w");
  p.gate_w = c.at("gate_w");
  p.up_w = c.at("up_w");
  p.down_w = c.at("down_w");
  p.post_attn_w = d.sandwich_norm ? c.at("post_attn_w") : nullptr;
  p.post_mlp_w = d.sandwich_norm ? c.at("post_mlp_w") : nullptr;
  return p;
}

}  // namespace

llama_rope llama_rope_at(const float* tables, const llama_dims& d) {
  const int64_t half = d.T * (d.D() / 2);  // one table: cos, then sin
  if (d.local_rope) tables += 2 * half;
  return {tables, tables + half};
}

template <class T>
llama_block_params<T> llama_block_params_at(const T* base, const llama_dims& d) {
  return block_tensors_at<llama_block_params<T>>(base, d);
}

template <class G>
llama_block_grads<G> llama_block_grads_at(G* base, const llama_dims& d) {
  return block_tensors_at<llama_block_grads<G>>(base, d);
}

template <class T>
llama_block_saved<T> llama_block_saved_at(std::byte* slot, const llama_dims& d) {
  const slot_carver c = llama_slot(model::llama_activations(tables(d)).block, d, sizeof(T), slot);
  llama_block_saved<T> s;
  s.rms1_rstd = c.at<float>("rms1_rstd");
  s.rms2_rstd = c.at<float>("rms2_rstd");
  s.lse = c.at<float>("lse");
  s.input = c.at<T>("input");
  s.post_attn_rstd = d.sandwich_norm ? c.at<float>("post_attn_rstd") : nullptr;
  s.post_mlp_rstd = d.sandwich_norm ? c.at<float>("post_mlp_rstd") : nullptr;
  s.rms1 = d.post_norm ? nullptr : c.at<T>("rms1");
  s.q_rstd = d.qk_norm ? c.at<float>("q_rstd") : nullptr;
  s.k_rstd = d.qk_norm ? c.at<float>("k_rstd") : nullptr;
  s.q_raw = d.qk_norm ? c.at<T>("q_raw") : nullptr;
  s.k_raw = d.qk_norm ? c.at<T>("k_raw") : nullptr;
  s.q = c.at<T>("q");
  s.k = c.at<T>("k");
  s.v = c.at<T>("v");
  s.attn = c.at<T>("attn");
  s.res2 = c.at<T>("res2");
  s.attn_out = d.post_norm || d.sandwich_norm ? c.at<T>("attn_out") : nullptr;
  s.rms2 = d.post_norm ? nullptr : c.at<T>("rms2");
  s.gate = c.at<T>("gate");
  s.up = c.at<T>("up");
  s.swiglu = c.at<T>("swiglu");
  s.mlp_out = d.post_norm || d.sandwich_norm ? c.at<T>("mlp_out") : nullptr;
  return s;
}

template <class T>
llama_final_norm_saved<T> llama_final_norm_saved_at(std::byte* slot, const llama_dims& d) {
  const slot_carver c = llama_slot(model::kLlamaFinalNormSaved, d, sizeof(T), slot);
  llama_final_norm_saved<T> s;
  s.rstd = c.at<float>("rstd");
  s.input = c.at<T>("input");
  s.output = c.at<T>("output");
  return s;
}

template <class T>
llama_backward_scratch<T> llama_backward_scratch_at(std::byte* base, const llama_dims& d) {
  const slot_carver c =
      llama_slot(model::llama_activations(tables(d)).backward_scratch, d, sizeof(T), base);
  llama_backward_scratch<T> s;
  s.dres = c.at<T>("dres");
  s.dtmp = c.at<T>("dtmp");
  s.big = c.at<T>("big");
  s.delta = c.at<float>("delta");
  return s;
}

#define LLAMA_INSTANTIATE_T(T)                                                                    \
  template llama_block_params<T> llama_block_params_at<T>(const T*, const llama_dims&);           \
  template llama_block_grads<T> llama_block_grads_at<T>(T*, const llama_dims&);                   \
  template llama_block_saved<T> llama_block_saved_at<T>(std::byte*, const llama_dims&);           \
  template llama_final_norm_saved<T> llama_final_norm_saved_at<T>(std::byte*, const llama_dims&); \
  template llama_backward_scratch<T> llama_backward_scratch_at<T>(std::byte*, const llama_dims&);

FSDPGEN_FOR_EACH_DTYPE(LLAMA_INSTANTIATE_T)
