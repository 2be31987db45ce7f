// layers: gpt2's embed, block and head passes through runtime/cpu/gpt2.h. A
// "recompute" is the block's forward without its last projection (out =
// nullptr), as a generated recompute calls it; embed and head recompute
// with their forward.
#include "runtime/calibrate/layers.h"

#include <cstring>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/calibrate/buffers.h"
#include "runtime/cpu/gpt2.h"
#include "runtime/dtype_pairs.h"
#include "runtime/model/gpt2.h"

namespace {

using fsdpgen::profile::LayerTime;

constexpr const char* kDimNames[] = {"B", "T", "C", "H", "F", "V", "Vp", "flash"};
constexpr float kParamStddev = 0.02f;  // GPT-2's initialisation
constexpr uint32_t kSeed = 1234;

std::string dims_problem(const LayerTime& l) {
  for (const char* name : kDimNames)
    if (!l.dims.count(name))
      return fmt::format("dims: missing '{}' (gpt2 needs B, T, C, H, F, V, Vp, flash)", name);
  for (const auto& [name, value] : l.dims) {
    bool known = false;
    for (const char* n : kDimNames)
      known = known || name == n;
    if (!known)
      return fmt::format("dims: unknown dimension '{}' (gpt2 has B, T, C, H, F, V, Vp, flash)",
                         name);
    if (name != "flash" && value < 1) return fmt::format("dims.{}: must be at least 1", name);
  }
  const auto& d = l.dims;
  if (d.at("flash") > 1) return "dims.flash: must be 0 or 1";
  if (d.at("C") % d.at("H") != 0)
    return fmt::format("dims: width C = {} is not a multiple of the {} heads", d.at("C"),
                       d.at("H"));
  if (d.at("Vp") < d.at("V"))
    return fmt::format("dims: padded vocab Vp = {} is below the vocab V = {}", d.at("Vp"),
                       d.at("V"));
  return "";
}

// One layer's buffers with the runtime's sizes, filled like a model's.
template <class T, class G>
class gpt2_layer {
 public:
  // Gradients, scratch and d(out) only for a backward.
  gpt2_layer(const gpt2_dims& d, int64_t param_elems, bool backward)
      : d_(d),
        rng_(kSeed),
        params_(param_elems * static_cast<int64_t>(sizeof(T))),
        grads_(backward ? param_elems * static_cast<int64_t>(sizeof(G)) : 0),
        scratch_(backward ? gpt2_backward_scratch_bytes(d, sizeof(T)) : 0),
        dout_(backward ? d.N() * d.C * static_cast<int64_t>(sizeof(T)) : 0),
        workspace_(kCpuGemmWorkspaceBytes) {
    fill_normal(params_.as<T>(), param_elems, kParamStddev, rng_);
    if (backward) fill_normal(dout_.as<T>(), d.N() * d.C, kParamStddev, rng_);
  }

  std::mt19937& rng() { return rng_; }
  T* params() const { return params_.as<T>(); }
  G* grads() const { return grads_.as<G>(); }
  gemm_workspace ws() const { return {workspace_.as<float>(), workspace_.bytes() / 4}; }
  gpt2_backward_scratch<T> scratch() const {
    return gpt2_backward_scratch_at<T>(scratch_.data(), d_);
  }
  // d(out) of the layer into the scratch (a backward overwrites it in place).
  void set_dout() const {
    std::memcpy(scratch().dres, dout_.data(), static_cast<size_t>(dout_.bytes()));
  }

 private:
  gpt2_dims d_;
  std::mt19937 rng_;
  host_buffer params_, grads_, scratch_, dout_, workspace_;
};

template <class T, class G>
measurement block_pass(const std::string& pass, const gpt2_dims& d, const measure_options& o) {
  gpt2_layer<T, G> layer(d, gpt2_block_param_elems(d), pass == "backward");
  host_buffer saved(gpt2_block_saved_bytes(d, sizeof(T)));
  host_buffer out(d.N() * d.C * static_cast<int64_t>(sizeof(T)));
  const auto p = gpt2_block_params_at<T>(layer.params(), d);
  const auto s = gpt2_block_saved_at<T>(saved.data(), d);
  fill_normal(s.input, d.N() * d.C, 1.0f, layer.rng());
  const gemm_workspace ws = layer.ws();
  T* const dst = pass == "recompute" ? nullptr : out.as<T>();
  if (pass != "backward")
    return measure(o, [&] { return seconds_of([&] { gpt2_block_forward(dst, p, s, d, ws); }); });
  gpt2_block_forward(out.as<T>(), p, s, d, ws);
  const auto g = gpt2_block_grads_at<G>(layer.grads(), d);
  const auto scratch = layer.scratch();
  return measure(o, [&] {
    layer.set_dout();
    return seconds_of([&] { gpt2_block_backward<T, G>(g, p, s, scratch, d, ws); });
  });
}

template <class T, class G>
measurement embed_pass(const std::string& pass, const gpt2_dims& d, const measure_options& o) {
  gpt2_layer<T, G> layer(d, (d.Vp() + d.T) * d.C, pass == "backward");
  host_buffer tokens(d.N() * 4), out(d.N() * d.C * static_cast<int64_t>(sizeof(T)));
  fill_token_ids(tokens.as<int32_t>(), d.N(), d.V, layer.rng());
  const T* wte = layer.params();
  const T* wpe = wte + d.Vp() * d.C;
  const int32_t* ids = tokens.as<int32_t>();
  if (pass != "backward")
    return measure(
        o, [&] { return seconds_of([&] { gpt2_embed_forward(out.as<T>(), ids, wte, wpe, d); }); });
  G* dwte = layer.grads();
  G* dwpe = dwte + d.Vp() * d.C;
  const auto scratch = layer.scratch();
  layer.set_dout();
  return measure(o, [&] {
    return seconds_of([&] { gpt2_embed_backward<T, G>(dwte, dwpe, ids, scratch, d); });
  });
}

template <class T, class G>
measurement head_pass(const std::string& pass, const gpt2_dims& d, const measure_options& o) {
  // ln_f weight and bias (C each), then the head (Vp, C) whose padded rows are zero.
  gpt2_layer<T, G> layer(d, 2 * d.C + d.Vp() * d.C, pass == "backward");
  const T* lnf_w = layer.params();
  const T* lnf_b = lnf_w + d.C;
  T* head_w = layer.params() + 2 * d.C;
  std::memset(static_cast<void*>(head_w + d.V * d.C), 0,
              static_cast<size_t>((d.Vp() - d.V) * d.C) * sizeof(T));
  host_buffer saved(gpt2_final_norm_saved_bytes(d, sizeof(T)));
  host_buffer targets(d.N() * 4), losses(d.N() * 4);
  host_buffer logits(d.N() * d.Vp() * static_cast<int64_t>(sizeof(T)));
  const auto s = gpt2_final_norm_saved_at<T>(saved.data(), d);
  fill_normal(s.input, d.N() * d.C, 1.0f, layer.rng());
  fill_token_ids(targets.as<int32_t>(), d.N(), d.V, layer.rng());
  const gemm_workspace ws = layer.ws();
  const float dloss_scale = 1.0f / static_cast<float>(d.N());  // the mean over the tokens
  const auto forward = [&] {
    gpt2_head_forward(logits.as<T>(), losses.as<float>(), targets.as<int32_t>(), lnf_w, lnf_b,
                      static_cast<const T*>(head_w), s, d, dloss_scale, ws);
  };
  if (pass != "backward") return measure(o, [&] { return seconds_of(forward); });
  forward();
  G* dlnf_w = layer.grads();
  G* dlnf_b = dlnf_w + d.C;
  G* dhead_w = dlnf_w + 2 * d.C;
  const auto scratch = layer.scratch();
  return measure(o, [&] {
    return seconds_of([&] {
      gpt2_head_backward<T, G>(dlnf_w, dlnf_b, dhead_w, lnf_w, head_w, logits.as<T>(), s, scratch,
                               d, ws);
    });
  });
}

template <class T, class G>
measurement pass_as(const LayerTime& l, const measure_options& o) {
  const gpt2_dims d = layer_dims(l);
  if (l.layer == "embed") return embed_pass<T, G>(l.pass, d, o);
  if (l.layer == "block") return block_pass<T, G>(l.pass, d, o);
  return head_pass<T, G>(l.pass, d, o);
}

// The gradient type G of a backward (a forward reads none: float). Only the
// pairs runtime/dtype_pairs.h lists are instantiated.
template <class T>
measurement with_grad_type(const LayerTime& l, const measure_options& o) {
  if (l.pass != "backward" || l.grad_dtype == "fp32") return pass_as<T, float>(l, o);
  if constexpr (fsdpgen::kHasDtypePair<T, bf16>)
    if (l.grad_dtype == "bf16") return pass_as<T, bf16>(l, o);
  if constexpr (fsdpgen::kHasDtypePair<T, fp16>)
    if (l.grad_dtype == "fp16") return pass_as<T, fp16>(l, o);
  throw std::logic_error("calibrate: a layer entry with a dtype pair layer_problem refuses");
}

}  // namespace

gpt2_dims layer_dims(const LayerTime& l) {
  const auto& d = l.dims;
  return {d.at("B"), d.at("T"), d.at("C"),          d.at("H"),
          d.at("F"), d.at("V"), d.at("flash") != 0, d.at("Vp")};
}

int64_t gpt2_block_param_elems(const gpt2_dims& d) {
  namespace model = fsdpgen::model;
  const model::Table<model::Tensor> t = model::kGpt2BlockParams;
  return model::offset_elems(t, t.count, {d.C, d.F, d.H, d.T, d.C, d.flash, d.V});
}

std::string layer_problem(const LayerTime& l) {
  if (l.family != "gpt2")
    return fmt::format("family: '{}' is not one this calibration measures (known: 'gpt2')",
                       l.family);
  if (const std::string p = dims_problem(l); !p.empty()) return p;
  if (l.pass == "backward" && !fsdpgen::has_dtype_pair(l.dtype, l.grad_dtype))
    return fmt::format(
        "dtype {} with grad_dtype {}: the CPU runtime has no kernels for that pair (gradients "
        "are fp32 or the params' dtype)",
        l.dtype, l.grad_dtype);
  return "";
}

measurement measure_layer(const LayerTime& l, const measure_options& o) {
  if (l.dtype == "bf16") return with_grad_type<bf16>(l, o);
  if (l.dtype == "fp16") return with_grad_type<fp16>(l, o);
  return with_grad_type<float>(l, o);
}
