// cuda_layers: embed, block and head passes on device buffers. A
// "recompute" is the block's forward with out = nullptr, as on a CPU.
#include "runtime/calibrate/cuda/cuda_layers.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <type_traits>

#include "runtime/calibrate/cuda/gpu.h"
#include "runtime/calibrate/layers.h"
#include "runtime/cuda/cudnn_attention.h"
#include "runtime/cuda/gpt2.h"

namespace {

using fsdpgen::profile::LayerTime;

constexpr float kParamStddev = 0.02f;
constexpr uint32_t kSeed = 1234;
// The GEMM workspace a GPU plan reserves (codegen/planner/Fit.cpp).
constexpr int64_t kGpuGemmWorkspaceBytes = int64_t{32} << 20;

template <class X>
constexpr dtype_id dtype_of() {
  return std::is_same_v<X, bf16>   ? dtype_id::bf16
         : std::is_same_v<X, fp16> ? dtype_id::fp16
                                   : dtype_id::fp32;
}

// The exec of one entry: g with its workspace and, for 16-bit flash
// attention where the runtime chooses cuDNN, cuDNN's graphs for this shape.
class entry_exec {
 public:
  entry_exec(const gpu_exec& g, const gpt2_dims& d, dtype_id param) : exec_(g) {
    int64_t workspace_bytes = kGpuGemmWorkspaceBytes;
    const attention_choice a =
        choose_attention(d.flash, param, d.C / d.H, d.T, 0.0f, cudnn_attention_built(),
                         std::getenv("FSDPGEN_ATTENTION"));
    if (a.kernels == attention_kernels::cudnn) {
      attention_.reset(gpu_attention_create());
      const cudnn_attention_shape shape{d.B, d.T, d.C, d.H, param};
      gpu_attention_prepare(*attention_, shape, std::numeric_limits<int64_t>::max());
      workspace_bytes =
          std::max(workspace_bytes, gpu_attention_workspace_bytes(*attention_, shape));
      exec_.attention = attention_.get();
    }
    workspace_ = std::make_unique<device_buffer>(workspace_bytes);
    exec_.lt_workspace = workspace_->data();
    exec_.lt_workspace_bytes = workspace_bytes;
  }
  gpu_exec& get() { return exec_; }

 private:
  struct attention_deleter {
    void operator()(gpu_attention* a) const { gpu_attention_destroy(a); }
  };
  gpu_exec exec_;
  std::unique_ptr<gpu_attention, attention_deleter> attention_;
  std::unique_ptr<device_buffer> workspace_;
};

// One layer's device buffers with the runtime's sizes (gradients, scratch
// and d(out) only for a backward).
template <class T, class G>
class gpu_layer {
 public:
  gpu_layer(const gpt2_dims& d, int64_t param_elems, bool backward)
      : d_(d),
        rng_(kSeed),
        params_(param_elems * static_cast<int64_t>(sizeof(T))),
        grads_(backward ? param_elems * static_cast<int64_t>(sizeof(G)) : 0),
        scratch_(backward ? gpt2_backward_scratch_bytes(d, sizeof(T)) : 0),
        dout_(backward ? d.N() * d.C * static_cast<int64_t>(sizeof(T)) : 0) {
    upload_normal(params_.data(), dtype_of<T>(), param_elems, kParamStddev, rng_);
    if (backward) upload_normal(dout_.data(), dtype_of<T>(), d.N() * d.C, kParamStddev, rng_);
  }
  std::mt19937& rng() { return rng_; }
  T* params() const { return params_.as<T>(); }
  G* grads() const { return grads_.as<G>(); }
  gpt2_backward_scratch<T> scratch() const {
    return gpt2_backward_scratch_at<T>(static_cast<std::byte*>(scratch_.data()), d_);
  }
  // d(out) of the layer into the scratch (a backward overwrites it in place).
  void set_dout(cudaStream_t stream) const {
    CUDA_CHECK(cudaMemcpyAsync(scratch().dres, dout_.data(), static_cast<size_t>(dout_.bytes()),
                               cudaMemcpyDeviceToDevice, stream));
  }

 private:
  gpt2_dims d_;
  std::mt19937 rng_;
  device_buffer params_, grads_, scratch_, dout_;
};

std::byte* bytes_of(const device_buffer& b) {
  return static_cast<std::byte*>(b.data());
}

template <class T, class G>
measurement block_pass(const std::string& pass, const gpt2_dims& d, gpu_exec& g,
                       const measure_options& o) {
  gpu_layer<T, G> layer(d, gpt2_block_param_elems(d), pass == "backward");
  device_buffer saved(gpt2_block_saved_bytes(d, sizeof(T)));
  device_buffer out(d.N() * d.C * static_cast<int64_t>(sizeof(T)));
  const auto p = gpt2_block_params_at<T>(layer.params(), d);
  const auto s = gpt2_block_saved_at<T>(bytes_of(saved), d);
  upload_normal(s.input, dtype_of<T>(), d.N() * d.C, 1.0f, layer.rng());
  T* const dst = pass == "recompute" ? nullptr : out.as<T>();
  if (pass != "backward")
    return measure(
        o, [&] { return gpu_seconds_of(g.stream, [&] { gpt2_block_forward(dst, p, s, d, g); }); });
  gpt2_block_forward(out.as<T>(), p, s, d, g);
  const auto grads = gpt2_block_grads_at<G>(layer.grads(), d);
  const auto scratch = layer.scratch();
  return measure(o, [&] {
    layer.set_dout(g.stream);
    return gpu_seconds_of(g.stream, [&] { gpt2_block_backward<T, G>(grads, p, s, scratch, d, g); });
  });
}

template <class T, class G>
measurement embed_pass(const std::string& pass, const gpt2_dims& d, gpu_exec& g,
                       const measure_options& o) {
  gpu_layer<T, G> layer(d, (d.Vp() + d.T) * d.C, pass == "backward");
  device_buffer tokens(d.N() * 4), out(d.N() * d.C * static_cast<int64_t>(sizeof(T)));
  upload_token_ids(tokens.as<int32_t>(), d.N(), d.V, layer.rng());
  const T* wte = layer.params();
  const T* wpe = wte + d.Vp() * d.C;
  const int32_t* ids = tokens.as<int32_t>();
  if (pass != "backward")
    return measure(o, [&] {
      return gpu_seconds_of(g.stream,
                            [&] { gpt2_embed_forward(out.as<T>(), ids, wte, wpe, d, g); });
    });
  G* dwte = layer.grads();
  G* dwpe = dwte + d.Vp() * d.C;
  const auto scratch = layer.scratch();
  layer.set_dout(g.stream);
  return measure(o, [&] {
    return gpu_seconds_of(g.stream,
                          [&] { gpt2_embed_backward<T, G>(dwte, dwpe, ids, scratch, d, g); });
  });
}

template <class T, class G>
measurement head_pass(const std::string& pass, const gpt2_dims& d, gpu_exec& g,
                      const measure_options& o) {
  // ln_f weight and bias (C each), then the head (Vp, C) whose padded rows are zero.
  gpu_layer<T, G> layer(d, 2 * d.C + d.Vp() * d.C, pass == "backward");
  const T* lnf_w = layer.params();
  const T* lnf_b = lnf_w + d.C;
  T* head_w = layer.params() + 2 * d.C;
  CUDA_CHECK(
      cudaMemset(head_w + d.V * d.C, 0, static_cast<size_t>((d.Vp() - d.V) * d.C) * sizeof(T)));
  device_buffer saved(gpt2_final_norm_saved_bytes(d, sizeof(T)));
  device_buffer targets(d.N() * 4), losses(d.N() * 4);
  device_buffer logits(d.N() * d.Vp() * static_cast<int64_t>(sizeof(T)));
  const auto s = gpt2_final_norm_saved_at<T>(bytes_of(saved), d);
  upload_normal(s.input, dtype_of<T>(), d.N() * d.C, 1.0f, layer.rng());
  upload_token_ids(targets.as<int32_t>(), d.N(), d.V, layer.rng());
  const float* dloss_scale = &g.scalars->dloss_scale;
  const auto forward = [&] {
    gpt2_head_forward(logits.as<T>(), losses.as<float>(), targets.as<int32_t>(), lnf_w, lnf_b,
                      static_cast<const T*>(head_w), s, d, dloss_scale, g);
  };
  if (pass != "backward") return measure(o, [&] { return gpu_seconds_of(g.stream, forward); });
  forward();
  G* dlnf_w = layer.grads();
  G* dlnf_b = dlnf_w + d.C;
  G* dhead_w = dlnf_w + 2 * d.C;
  const auto scratch = layer.scratch();
  return measure(o, [&] {
    return gpu_seconds_of(g.stream, [&] {
      gpt2_head_backward<T, G>(dlnf_w, dlnf_b, dhead_w, lnf_w, head_w, logits.as<T>(), s, scratch,
                               d, g);
    });
  });
}

template <class T, class G>
measurement pass_as(const LayerTime& l, const gpu_exec& base, const measure_options& o) {
  const gpt2_dims d = layer_dims(l);
  entry_exec exec(base, d, dtype_of<T>());
  gpu_exec& g = exec.get();
  if (l.layer == "embed") return embed_pass<T, G>(l.pass, d, g, o);
  if (l.layer == "block") return block_pass<T, G>(l.pass, d, g, o);
  return head_pass<T, G>(l.pass, d, g, o);
}

// The gradient type G of a backward (a forward reads none: float); only the
// pairs runtime/cuda/gpt2.cu instantiates (layer_problem refuses the others).
template <class T>
measurement with_grad_type(const LayerTime& l, const gpu_exec& g, const measure_options& o) {
  if (l.pass != "backward" || l.grad_dtype == "fp32") return pass_as<T, float>(l, g, o);
  if constexpr (!std::is_same_v<T, fp16>)
    if (l.grad_dtype == "bf16") return pass_as<T, bf16>(l, g, o);
  if constexpr (!std::is_same_v<T, bf16>)
    if (l.grad_dtype == "fp16") return pass_as<T, fp16>(l, g, o);
  throw std::logic_error("calibrate: a layer entry with a dtype pair layer_problem refuses");
}

}  // namespace

measurement cuda_measure_layer(const LayerTime& l, const gpu_exec& g, const measure_options& o) {
  if (l.dtype == "bf16") return with_grad_type<bf16>(l, g, o);
  if (l.dtype == "fp16") return with_grad_type<fp16>(l, g, o);
  return with_grad_type<float>(l, g, o);
}
