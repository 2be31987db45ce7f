// generator: the forward pass against a KV cache, and the sampler.
#include "runtime/generate/generator.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/cpu/kernels_shared.h"
#include "runtime/files/safetensors_set.h"
#include "runtime/kernel_math.h"
#include "runtime/model/gpt2.h"
#include "runtime/model/llama.h"
#include "runtime/rope.h"

namespace {

namespace model = fsdpgen::model;

const model::ParamLayout& layout_of(const hf_model& m) {
  return m.llama ? model::llama_params(model::LlamaTables{
                       m.qkv_bias, m.qk_norm, m.qk_norm_across_heads, m.post_norm, m.sandwich_norm})
                 : model::kGpt2Params;
}

model::Dims dims_of(const hf_model& m) {
  model::Dims d;
  d.C = m.width;
  d.F = m.ffn_hidden;
  d.H = m.heads;
  d.T = m.context;
  d.D = m.head_dim;  // 0: width / heads
  d.KV = m.kv_heads * d.head_dim();
  d.V = m.vocab;
  return d;
}

std::vector<int64_t> shape_of(const model::Shape& s, const model::Dims& d) {
  std::vector<int64_t> shape;
  for (int i = 0; i < s.rank; ++i)
    shape.push_back(s.dims[i](d));
  return shape;
}

std::string block_name(const hf_model& m, int64_t layer, const char* hf_name) {
  const std::string prefix = layout_of(m).block_prefix;  // "transformer.h.{}."
  const size_t at = prefix.find("{}");
  return prefix.substr(0, at) + std::to_string(layer) + prefix.substr(at + 2) + hf_name;
}

// Row `name` of gpt2's block table, as a constant.
constexpr size_t gpt2_row(const char* name) {
  return model::index_of(model::Table<model::Tensor>(model::kGpt2BlockParams), name);
}

// out (n, N) = in (n, K) W, W (K, N) (GPT-2's Conv1D) or, with out_in, W (N, K)
// (nn.Linear); beta 1 adds to what out holds. Then + bias (N) when given.
void linear(const float* in, int64_t n, int64_t K, const float* W, int64_t N, bool out_in,
            const float* bias, float* out, float beta = 0.0f) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, out_in ? CblasTrans : CblasNoTrans, static_cast<int>(n),
              static_cast<int>(N), static_cast<int>(K), 1.0f, in, static_cast<int>(K), W,
              static_cast<int>(out_in ? K : N), beta, out, static_cast<int>(N));
  if (bias)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < N; ++j)
        out[i * N + j] += bias[j];
}

// LayerNorm (bias given) or RMSNorm (bias null) of each of n rows of width C.
void norm_rows(const float* x, int64_t n, int64_t C, const float* w, const float* b, double eps,
               float* out, float w_offset = 0.0f) {
  for (int64_t i = 0; i < n; ++i) {
    const float* r = x + i * C;
    float* o = out + i * C;
    float mean = 0.0f;
    if (b) {
      for (int64_t j = 0; j < C; ++j)
        mean += r[j];
      mean /= static_cast<float>(C);
    }
    float var = 0.0f;
    for (int64_t j = 0; j < C; ++j)
      var += (r[j] - mean) * (r[j] - mean);
    var /= static_cast<float>(C);
    const float rstd = 1.0f / std::sqrt(var + static_cast<float>(eps));
    for (int64_t j = 0; j < C; ++j)
      o[j] = (r[j] - mean) * rstd * (w_offset + w[j]) + (b ? b[j] : 0.0f);
  }
}

}  // namespace

generate_tensors generate_weights::view() const {
  generate_tensors t;
  for (const auto& [name, values] : data)
    t[name] = {values.data(), shapes.at(name)};
  return t;
}

generate_weights generate_weights_read(const std::string& path) {
  const safetensors_set set = safetensors_set_open(path);
  generate_weights w;
  for (const auto& [name, at] : set.where) {
    const safetensors_file& f = set.files[at.first];
    const safetensors_tensor& t = f.tensors[at.second];
    std::vector<float>& v = w.data[name];
    v.resize(static_cast<size_t>(t.elems()));
    safetensors_read(f, t, 0, t.elems(), v.data());
    w.shapes[name] = t.shape;
  }
  return w;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> generate_tensor_names(const hf_model& m) {
  const model::ParamLayout& l = layout_of(m);
  const model::Dims d = dims_of(m);
  std::vector<std::pair<std::string, std::vector<int64_t>>> names;
  for (const model::Tensor& t : l.embed)
    names.emplace_back(t.hf_name, shape_of(t.shape, d));
  for (int64_t layer = 0; layer < m.layers; ++layer)
    for (const model::Tensor& t : l.block)
      names.emplace_back(block_name(m, layer, t.hf_name), shape_of(t.shape, d));
  for (const model::Tensor& t : l.final_norm)
    names.emplace_back(t.hf_name, shape_of(t.shape, d));
  if (!m.tied)
    for (const model::Tensor& t : l.head)
      names.emplace_back(t.hf_name, shape_of(t.shape, d));
  return names;
}

std::string sample_settings_problem(const sample_settings& s) {
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature))
    return fmt::format("temperature {} is not a number >= 0 (0: greedy)", s.temperature);
  if (s.top_k < 0) return fmt::format("top-k {} is negative (0: every token)", s.top_k);
  if (!(s.top_p > 0 && s.top_p <= 1))
    return fmt::format("top-p {} is outside (0, 1] (1: every token)", s.top_p);
  return "";
}

generator::generator(const hf_model& m, const generate_tensors& tensors) : m_(m) {
  if (m.width <= 0 || m.heads <= 0 || (m.head_dim <= 0 && m.width % m.heads != 0) ||
      m.head_dim < 0 || (!m.llama && m.head_dim > 0 && m.head_dim * m.heads != m.width) ||
      m.kv_heads <= 0 || m.heads % m.kv_heads != 0 || m.vocab <= 0 || m.context <= 0 ||
      m.layers <= 0 || m.ffn_hidden <= 0)
    throw std::runtime_error(fmt::format(
        "the model's shape cannot run: width {}, heads {}, head size {}, kv heads {}, vocab {}, "
        "context {}, layers {}, ffn hidden {}",
        m.width, m.heads, m.head_dim, m.kv_heads, m.vocab, m.context, m.layers, m.ffn_hidden));
  head_dim_ = dims_of(m).head_dim();
  q_width_ = m.heads * head_dim_;
  kv_width_ = m.kv_heads * head_dim_;
  for (const auto& [name, shape] : generate_tensor_names(m)) {
    auto it = tensors.find(name);
    if (it == tensors.end())
      throw std::runtime_error(
          fmt::format("the weights lack {} (shape [{}])", name, fmt::join(shape, ", ")));
    if (it->second.shape != shape)
      throw std::runtime_error(fmt::format("the weights' {} is [{}], the model's is [{}]", name,
                                           fmt::join(it->second.shape, ", "),
                                           fmt::join(shape, ", ")));
    w_[name] = it->second.data;
  }
  const model::ParamLayout& l = layout_of(m);
  head_ = weight(m.tied ? l.embed[0].hf_name : l.head[0].hf_name);
  for (int64_t layer = 0; layer < m.layers; ++layer)
    for (const model::Tensor& t : l.block)
      block_w_.push_back(weight(block_name(m, layer, t.hf_name)));

  const int64_t T = m.context, C = m.width, L = m.layers;
  const int64_t widest = std::max(3 * C, q_width_);  // GPT-2's qkv; llama's q
  auto alloc = [&](std::vector<float>& v, int64_t elems) {
    v.assign(static_cast<size_t>(elems), 0.0f);
    bytes_ += elems * static_cast<int64_t>(sizeof(float));
  };
  alloc(k_cache_, L * T * kv_width_);
  alloc(v_cache_, L * T * kv_width_);
  alloc(x_, T * C);
  alloc(h_, T * C);
  alloc(qkv_, T * widest);
  alloc(attn_, T * q_width_);
  alloc(ffn_, T * 2 * m.ffn_hidden);
  alloc(scores_, static_cast<int64_t>(omp_get_max_threads()) * T);
  alloc(logits_, m.vocab);
  if (m.llama) {
    // With a local base (Gemma 3) the windowed layers' tables follow, unscaled.
    const int64_t tables = m.rope_local_theta != 0 ? 2 : 1, half = T * head_dim_ / 2;
    alloc(rope_cos_, tables * half);
    alloc(rope_sin_, tables * half);
    rope_scaling scaling;
    if (m.rope_factor > 0)
      scaling = {m.rope_factor, m.rope_low_freq, m.rope_high_freq, m.rope_original_context,
                 m.rope_linear};
    rope_tables(rope_cos_.data(), rope_sin_.data(), T, head_dim_, m.rope_theta, scaling);
    if (tables == 2)
      rope_tables(rope_cos_.data() + half, rope_sin_.data() + half, T, head_dim_,
                  m.rope_local_theta, {});
  }
  order_.resize(static_cast<size_t>(m.vocab));
  bytes_ += m.vocab * static_cast<int64_t>(sizeof(int32_t));
}

const float* generator::weight(std::string_view name) const {
  auto it = w_.find(name);
  if (it == w_.end()) throw std::logic_error(fmt::format("generator: no weight {}", name));
  return it->second;
}

// Attention of rows [0, n) at positions cached_ + i over the cache's
// positions [0, cached_ + i], or with a sliding window W its last W of them:
// q (n, C) at qkv_ (rows 3C apart for GPT-2's qkv), the output (n, C) into attn_.
void generator::attention(int64_t layer, int64_t n) {
  const int64_t C = m_.width, H = m_.heads, D = head_dim_, T = m_.context;
  const int64_t group = H / m_.kv_heads;
  const int64_t Q = q_width_, q_stride = m_.llama ? Q : 3 * C;
  const float* K = k_cache_.data() + layer * T * kv_width_;
  const float* V = v_cache_.data() + layer * T * kv_width_;
  const double S = m_.query_pre_attn_scalar;  // Gemma 2's; 0: the head size
  const float scale = 1.0f / std::sqrt(static_cast<float>(S > 0 ? S : D));
  const float cap = static_cast<float>(m_.attention_softcap);
  const bool windowed = m_.window > 0 && model::windowed_layer(m_.global_every, layer);
  // Threads for a prefill only: one token's attention is small, and an OpenMP
  // region each token leaves libgomp's threads spinning against OpenBLAS's
  // (GPT-2 124M on 2 cores: 8 tok/s with it, 29 without; transformers 28).
#pragma omp parallel for collapse(2) schedule(static) if (n > 1)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h) {
      float* s = scores_.data() + static_cast<int64_t>(omp_get_thread_num()) * T;
      const float* q = qkv_.data() + i * q_stride + h * D;
      const int64_t kv = (h / group) * D, last = cached_ + i;
      const int64_t first = windowed ? std::max<int64_t>(0, last - m_.window + 1) : 0;
      float largest = -INFINITY;
      for (int64_t t = first; t <= last; ++t) {
        const float* k = K + t * kv_width_ + kv;
        float dot = 0.0f;
        for (int64_t j = 0; j < D; ++j)
          dot += q[j] * k[j];
        s[t] = softcap_of(dot * scale, cap);
        largest = std::max(largest, s[t]);
      }
      float sum = 0.0f;
      for (int64_t t = first; t <= last; ++t) {
        s[t] = exp_clamped(s[t] - largest);
        sum += s[t];
      }
      float* out = attn_.data() + i * Q + h * D;
      std::fill(out, out + D, 0.0f);
      for (int64_t t = first; t <= last; ++t) {
        const float p = s[t] / sum;
        const float* v = V + t * kv_width_ + kv;
        for (int64_t j = 0; j < D; ++j)
          out[j] += p * v[j];
      }
    }
}

// One block over rows [0, n) of x_ at positions cached_ + i.
void generator::block(int64_t layer, int64_t n) {
  const int64_t C = m_.width, F = m_.ffn_hidden, T = m_.context;
  const size_t rows = layout_of(m_).block.count;
  auto w = [&](size_t row) { return block_w_[static_cast<size_t>(layer) * rows + row]; };
  float* k_rows = k_cache_.data() + (layer * T + cached_) * kv_width_;
  float* v_rows = v_cache_.data() + (layer * T + cached_) * kv_width_;
  if (!m_.llama) {
    norm_rows(x_.data(), n, C, w(gpt2_row("ln1_w")), w(gpt2_row("ln1_b")), m_.norm_eps, h_.data());
    linear(h_.data(), n, C, w(gpt2_row("qkv_w")), 3 * C, false, w(gpt2_row("qkv_b")), qkv_.data());
    for (int64_t i = 0; i < n; ++i) {
      const float* r = qkv_.data() + i * 3 * C;
      std::copy(r + C, r + 2 * C, k_rows + i * C);
      std::copy(r + 2 * C, r + 3 * C, v_rows + i * C);
    }
    attention(layer, n);
    linear(attn_.data(), n, C, w(gpt2_row("proj_w")), C, false, w(gpt2_row("proj_b")), x_.data(),
           1.0f);
    norm_rows(x_.data(), n, C, w(gpt2_row("ln2_w")), w(gpt2_row("ln2_b")), m_.norm_eps, h_.data());
    linear(h_.data(), n, C, w(gpt2_row("fc_w")), F, false, w(gpt2_row("fc_b")), ffn_.data());
    for (int64_t j = 0; j < n * F; ++j) {
      const float x = ffn_[static_cast<size_t>(j)];
      ffn_[static_cast<size_t>(j)] = gelu_of(x, exp_clamped(-2.0f * gelu_tanh_arg(x)));
    }
    linear(ffn_.data(), n, F, w(gpt2_row("fc2_w")), C, false, w(gpt2_row("fc2_b")), x_.data(),
           1.0f);
    return;
  }
  const int64_t half = head_dim_ / 2;
  // llama's tensor `name` (q_b, k_b and v_b: null without qkv_bias).
  auto lw = [&](const char* name) {
    const model::Table<model::Tensor> table = layout_of(m_).block;
    for (size_t i = 0; i < table.count; ++i)
      if (model::same_name(table[i].name, name)) return w(i);
    return static_cast<const float*>(nullptr);
  };
  // OLMo 2 (post_norm): q, k, v and the MLP read the residual stream, and each
  // sub-block's output passes its norm (rms1_w, rms2_w) before the residual add;
  // Gemma 2 and 3 (sandwich_norm) have both the norms before and the norms
  // after (post_attn_w, post_mlp_w).
  const bool post = m_.post_norm;
  const float offset = m_.norm_plus_one ? 1.0f : 0.0f;  // Gemma's norms: (1 + weight)
  if (!post) norm_rows(x_.data(), n, C, lw("rms1_w"), nullptr, m_.norm_eps, h_.data(), offset);
  const float* in = post ? x_.data() : h_.data();
  // q (n, Q) into qkv_; k and v (n, KV) straight into the cache's rows.
  linear(in, n, C, lw("q_w"), q_width_, true, lw("q_b"), qkv_.data());
  linear(in, n, C, lw("k_w"), kv_width_, true, lw("k_b"), k_rows);
  linear(in, n, C, lw("v_w"), kv_width_, true, lw("v_b"), v_rows);
  if (m_.qk_norm) {  // RMSNorm before the rotation: each head's (Qwen3) or all heads' (OLMo 2)
    const int64_t q_group = m_.qk_norm_across_heads ? q_width_ : head_dim_;
    const int64_t k_group = m_.qk_norm_across_heads ? kv_width_ : head_dim_;
    norm_rows(qkv_.data(), n * q_width_ / q_group, q_group, lw("q_norm_w"), nullptr, m_.norm_eps,
              qkv_.data(), offset);
    norm_rows(k_rows, n * kv_width_ / k_group, k_group, lw("k_norm_w"), nullptr, m_.norm_eps,
              k_rows, offset);
  }
  // Rotary positions: row i is position cached_ + i; a windowed layer's
  // tables are the second ones where it has its own base (Gemma 3).
  const int64_t table =
      m_.rope_local_theta != 0 && model::local_layer(m_.global_every, layer) ? T * half : 0;
  const float* cos = rope_cos_.data() + table + cached_ * half;
  const float* sin = rope_sin_.data() + table + cached_ * half;
  rope_forward(qkv_.data(), cos, sin, n, n, m_.heads, head_dim_);
  rope_forward(k_rows, cos, sin, n, n, m_.kv_heads, head_dim_);
  attention(layer, n);
  // x += branch, through its norm `w` first where it has one after it.
  auto add_branch = [&](const float* from, int64_t K, const float* W, const float* w) {
    if (w == nullptr) return linear(from, n, K, W, C, true, nullptr, x_.data(), 1.0f);
    linear(from, n, K, W, C, true, nullptr, h_.data());
    norm_rows(h_.data(), n, C, w, nullptr, m_.norm_eps, h_.data(), offset);
    for (int64_t j = 0; j < n * C; ++j)
      x_[static_cast<size_t>(j)] += h_[static_cast<size_t>(j)];
  };
  add_branch(attn_.data(), q_width_, lw("o_w"), post ? lw("rms1_w") : lw("post_attn_w"));
  if (!post) norm_rows(x_.data(), n, C, lw("rms2_w"), nullptr, m_.norm_eps, h_.data(), offset);
  float* gate = ffn_.data();
  float* up = ffn_.data() + n * F;
  linear(in, n, C, lw("gate_w"), F, true, nullptr, gate);
  linear(in, n, C, lw("up_w"), F, true, nullptr, up);
  for (int64_t j = 0; j < n * F; ++j)  // SwiGLU, or Gemma's GeGLU
    gate[j] = m_.gelu_gate ? gelu_of(gate[j], exp_clamped(-2.0f * gelu_tanh_arg(gate[j]))) * up[j]
                           : swiglu_of(gate[j], up[j], exp_clamped(-gate[j]));
  add_branch(gate, F, lw("down_w"), post ? lw("rms2_w") : lw("post_mlp_w"));
}

const float* generator::forward(std::span<const int32_t> ids, float* all_logits) {
  const int64_t n = static_cast<int64_t>(ids.size()), C = m_.width;
  if (n == 0) throw std::invalid_argument("generator: no tokens to run");
  if (cached_ + n > m_.context)
    throw std::invalid_argument(
        fmt::format("generator: positions {} to {} are past the model's context of {}", cached_,
                    cached_ + n - 1, m_.context));
  const model::ParamLayout& l = layout_of(m_);
  const float* wte = weight(l.embed[0].hf_name);
  const float* wpe = m_.llama ? nullptr : weight(l.embed[1].hf_name);
  const float scale = embedding_scale_of(C);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[static_cast<size_t>(i)];
    if (id < 0 || id >= m_.vocab)
      throw std::invalid_argument(
          fmt::format("token id {} is outside the vocabulary [0, {})", id, m_.vocab));
    float* x = x_.data() + i * C;
    std::copy(wte + id * C, wte + (id + 1) * C, x);
    if (m_.scale_embedding)  // Gemma: the rows times sqrt(C), the scale rounded to fp32
      for (int64_t j = 0; j < C; ++j)
        x[j] *= scale;
    if (wpe)
      for (int64_t j = 0; j < C; ++j)
        x[j] += wpe[(cached_ + i) * C + j];
  }
  for (int64_t layer = 0; layer < m_.layers; ++layer)
    block(layer, n);
  const float* b = m_.llama ? nullptr : weight(l.final_norm[1].hf_name);
  norm_rows(x_.data(), n, C, weight(l.final_norm[0].hf_name), b, m_.norm_eps, h_.data(),
            m_.norm_plus_one ? 1.0f : 0.0f);
  // Gemma 2's final_logit_softcapping: X tanh(logit / X).
  auto cap = [X = static_cast<float>(m_.logit_softcap)](float* l, int64_t elems) {
    if (X > 0.0f)
      for (int64_t j = 0; j < elems; ++j)
        l[j] = softcap_of(l[j], X);
  };
  if (all_logits) {
    linear(h_.data(), n, C, head_, m_.vocab, true, nullptr, all_logits);
    cap(all_logits, n * m_.vocab);
  }
  linear(h_.data() + (n - 1) * C, 1, C, head_, m_.vocab, true, nullptr, logits_.data());
  cap(logits_.data(), m_.vocab);
  cached_ += n;
  return logits_.data();
}

int32_t generator::pick(const float* logits, const sample_settings& s, std::mt19937_64& rng) {
  const int64_t V = m_.vocab;
  if (s.temperature == 0)
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  std::iota(order_.begin(), order_.end(), 0);
  auto more_likely = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const int64_t k = s.top_k > 0 ? std::min(s.top_k, V) : V;
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), more_likely);
  // Probabilities of the k kept, relative to the most likely (exp 0 = 1).
  const double top = logits[order_[0]] / s.temperature;
  double total = 0;
  for (int64_t i = 0; i < k; ++i)
    total += std::exp(logits[order_[static_cast<size_t>(i)]] / s.temperature - top);
  int64_t kept = k;
  if (s.top_p < 1) {
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      sum += std::exp(logits[order_[static_cast<size_t>(i)]] / s.temperature - top) / total;
      if (sum >= s.top_p) {
        kept = i + 1;
        break;
      }
    }
    total = 0;
    for (int64_t i = 0; i < kept; ++i)
      total += std::exp(logits[order_[static_cast<size_t>(i)]] / s.temperature - top);
  }
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  double sum = 0;
  for (int64_t i = 0; i < kept; ++i) {
    sum += std::exp(logits[order_[static_cast<size_t>(i)]] / s.temperature - top);
    if (sum > u) return order_[static_cast<size_t>(i)];
  }
  return order_[static_cast<size_t>(kept - 1)];
}

std::vector<int32_t> generator::generate(std::span<const int32_t> prompt, int64_t tokens,
                                         const sample_settings& s) {
  if (prompt.empty()) throw std::invalid_argument("generator: the prompt is empty");
  if (static_cast<int64_t>(prompt.size()) > m_.context)
    throw std::invalid_argument(fmt::format(
        "the prompt's {} tokens exceed the model's context of {}", prompt.size(), m_.context));
  std::mt19937_64 rng(s.seed);
  reset();
  std::vector<int32_t> out;
  const float* logits = forward(prompt);
  for (int64_t i = 0; i < tokens; ++i) {
    const int32_t next = pick(logits, s, rng);
    out.push_back(next);
    if (i + 1 == tokens || cached_ == m_.context) break;
    logits = forward(std::span<const int32_t>(&out.back(), 1));
  }
  return out;
}
