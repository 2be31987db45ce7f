// gpt2: pointers into the saved-activation, parameter and scratch layouts of
// runtime/model/gpt2.h, for both backends.
#include "runtime/gpt2.h"

#include <iterator>
#include <type_traits>

#include "runtime/dtype_pairs.h"
#include "runtime/layout_carver.h"
#include "runtime/model/gpt2.h"

namespace {

namespace model = fsdpgen::model;

static_assert(model::same_name(model::kGpt2BlockPieces[kGpt2Qkv].name, "attn.c_attn") &&
                  model::same_name(model::kGpt2BlockPieces[kGpt2Fc2].name, "mlp.c_proj") &&
                  std::size(model::kGpt2BlockPieces) == kGpt2Pieces,
              "gpt2_piece follows runtime/model/gpt2.h's kGpt2BlockPieces");

// gpt2 attends with every head: k and v are C wide.
model::Dims layout_dims(const gpt2_dims& d) {
  return {d.C, d.F, d.H, d.T, d.C, d.flash};
}

// The arrays of a slot laid out by one of runtime/model/gpt2.h's tables.
slot_carver gpt2_slot(model::Table<model::Field> table, const gpt2_dims& d, int64_t param_bytes,
                      std::byte* base) {
  return {table, layout_dims(d), d.N(), param_bytes, base};
}

}  // namespace

int64_t gpt2_block_saved_bytes(const gpt2_dims& d, int64_t a) {
  return model::slot_bytes(model::kGpt2BlockSaved, layout_dims(d), d.N(), a);
}

int64_t gpt2_final_norm_saved_bytes(const gpt2_dims& d, int64_t a) {
  return model::slot_bytes(model::kGpt2FinalNormSaved, layout_dims(d), d.N(), a);
}

int64_t gpt2_backward_scratch_bytes(const gpt2_dims& d, int64_t a) {
  return model::slot_bytes(model::kGpt2BackwardScratch, layout_dims(d), d.N(), a);
}

// A block's tensors (params and grads alike).
template <class Out, class Ptr>
Out block_tensors_at(Ptr base, const gpt2_dims& d) {
  const tensor_carver<std::remove_pointer_t<Ptr>> c{model::kGpt2BlockParams, layout_dims(d), base};
  Out p;
  p.ln1_w = c.at("ln1_w");
  p.ln1_b = c.at("ln1_b");
  p.qkv_w = c.at("qkv_w");
  p.qkv_b = c.at("qkv_b");
  p.proj_w = c.at("proj_w");
  p.proj_b = c.at("proj_b");
  p.ln2_w = c.at("ln2_w");
  p.ln2_b = c.at("ln2_b");
  p.fc_w = c.at("fc_w");
  p.fc_b = c.at("fc_b");
  p.fc2_w = c.at("fc2_w");
  p.fc2_b = c.at("fc2_b");
  return p;
}

template <class T>
gpt2_block_params<T> gpt2_block_params_at(const T* base, const gpt2_dims& d) {
  return block_tensors_at<gpt2_block_params<T>>(base, d);
}

template <class G>
gpt2_block_grads<G> gpt2_block_grads_at(G* base, const gpt2_dims& d) {
  return block_tensors_at<gpt2_block_grads<G>>(base, d);
}

template <class T>
gpt2_block_saved<T> gpt2_block_saved_at(std::byte* slot, const gpt2_dims& d) {
  const slot_carver c = gpt2_slot(model::kGpt2BlockSaved, d, sizeof(T), slot);
  gpt2_block_saved<T> s;
  s.ln1_mean = c.at<float>("ln1_mean");
  s.ln1_rstd = c.at<float>("ln1_rstd");
  s.ln2_mean = c.at<float>("ln2_mean");
  s.ln2_rstd = c.at<float>("ln2_rstd");
  s.input = c.at<T>("input");
  s.ln1 = c.at<T>("ln1");
  s.qkv = c.at<T>("qkv");
  s.attn = c.at<T>("attn");
  s.res2 = c.at<T>("res2");
  s.ln2 = c.at<T>("ln2");
  s.fc = c.at<T>("fc");
  s.gelu = c.at<T>("gelu");
  s.probs = c.at<T>("probs");
  s.lse = c.at<float>("lse");
  return s;
}

template <class T>
gpt2_final_norm_saved<T> gpt2_final_norm_saved_at(std::byte* slot, const gpt2_dims& d) {
  const slot_carver c = gpt2_slot(model::kGpt2FinalNormSaved, d, sizeof(T), slot);
  gpt2_final_norm_saved<T> s;
  s.mean = c.at<float>("mean");
  s.rstd = c.at<float>("rstd");
  s.input = c.at<T>("input");
  s.output = c.at<T>("output");
  return s;
}

template <class T>
gpt2_backward_scratch<T> gpt2_backward_scratch_at(std::byte* base, const gpt2_dims& d) {
  const slot_carver c = gpt2_slot(model::kGpt2BackwardScratch, d, sizeof(T), base);
  gpt2_backward_scratch<T> s;
  s.dres = c.at<T>("dres");
  s.dtmp = c.at<T>("dtmp");
  s.big = c.at<T>("big");
  s.delta = c.at<float>("delta");
  return s;
}

#define GPT2_INSTANTIATE_T(T)                                                                  \
  template gpt2_block_params<T> gpt2_block_params_at<T>(const T*, const gpt2_dims&);           \
  template gpt2_block_grads<T> gpt2_block_grads_at<T>(T*, const gpt2_dims&);                   \
  template gpt2_block_saved<T> gpt2_block_saved_at<T>(std::byte*, const gpt2_dims&);           \
  template gpt2_final_norm_saved<T> gpt2_final_norm_saved_at<T>(std::byte*, const gpt2_dims&); \
  template gpt2_backward_scratch<T> gpt2_backward_scratch_at<T>(std::byte*, const gpt2_dims&);

FSDPGEN_FOR_EACH_DTYPE(GPT2_INSTANTIATE_T)
