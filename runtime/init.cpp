// init: the GPT-2 initialization rule and its counter-based normal generator.
#include "runtime/init.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/fnv1a.h"
#include "runtime/program.h"

namespace {

// splitmix64's finalizer: a bijective 64-bit mix.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Output n of the splitmix64 stream that starts at key.
uint64_t stream_at(uint64_t key, uint64_t n) {
  return mix64(key + (n + 1) * 0x9E3779B97F4A7C15ull);
}

// A standard normal from two uniforms of element i's own counters.
double normal_at(uint64_t key, int64_t i) {
  const double u1 = static_cast<double>((stream_at(key, 2 * i) >> 11) + 1) * 0x1p-53;  // (0, 1]
  const double u2 = static_cast<double>(stream_at(key, 2 * i + 1) >> 11) * 0x1p-53;    // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

init_rule init_gpt2_rule(std::string_view name, int64_t n_layer) {
  const size_t last = name.rfind('.');
  const std::string_view leaf = last == std::string_view::npos ? "" : name.substr(last + 1);
  if (leaf != "weight" && leaf != "bias")
    throw std::runtime_error(
        fmt::format("init: tensor '{}' is not '<module>.weight' or '<module>.bias'", name));
  if (leaf == "bias") return {init_kind::zeros, 0};
  const std::string_view path = name.substr(0, last);
  const size_t dot = path.rfind('.');
  const std::string_view module = dot == std::string_view::npos ? path : path.substr(dot + 1);
  if (module.starts_with("ln_") || module.find("norm") != std::string_view::npos)
    return {init_kind::ones, 0};
  if (module == "c_proj") {
    if (n_layer < 1)
      throw std::runtime_error(
          fmt::format("init: tensor '{}' needs n_layer >= 1, got {}", name, n_layer));
    return {init_kind::normal, static_cast<float>(0.02 / std::sqrt(2.0 * n_layer))};
  }
  return {init_kind::normal, 0.02f};
}

void init_range(float* out, std::string_view name, init_rule rule, uint64_t seed, int64_t begin,
                int64_t end) {
  if (begin < 0 || end < begin)
    throw std::runtime_error(
        fmt::format("init: bad element range [{}, {}) of tensor '{}'", begin, end, name));
  const int64_t n = end - begin;
  if (rule.kind != init_kind::normal) {
    std::fill(out, out + n, rule.kind == init_kind::ones ? 1.0f : 0.0f);
    return;
  }
  const uint64_t key = mix64(seed ^ mix64(fnv1a(name)));
  const double sigma = rule.stddev;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; i++)
    out[i] = static_cast<float>(sigma * normal_at(key, begin + i));
}

void init_gpt2_range(float* out, std::string_view name, int64_t n_layer, uint64_t seed,
                     int64_t begin, int64_t end) {
  init_range(out, name, init_gpt2_rule(name, n_layer), seed, begin, end);
}

bool init_weight_decays(std::string_view name) {
  return init_gpt2_rule(name, 1).kind == init_kind::normal;
}

init_rule init_tensor_rule(const program_tensor& t, int64_t n_layer, bool norm_plus_one) {
  switch (t.init) {
    case tensor_init::by_name:
      break;
    case tensor_init::zeros:
      return {init_kind::zeros, 0};
    case tensor_init::ones:
      return {init_kind::ones, 0};
    case tensor_init::normal:
      return {init_kind::normal, t.init_std};
  }
  const init_rule r = init_gpt2_rule(t.name, n_layer);
  // Gemma's RMSNorms scale by (1 + weight): ones are zero weights.
  return norm_plus_one && r.kind == init_kind::ones ? init_rule{init_kind::zeros, 0} : r;
}

bool init_tensor_decays(const program_tensor& t) {
  return t.init == tensor_init::by_name ? init_weight_decays(t.name)
                                        : t.init == tensor_init::normal;
}

std::string init_describe(const program& p) {
  std::string out = p.model.family == model_family::llama ? "Llama init" : "GPT-2 init";
  if (p.model.norm_plus_one) out += " (RMSNorm weights 0: they scale by 1 + weight)";
  std::vector<std::string> seen;
  for (int i = 0; i < p.tensor_count; ++i) {
    const program_tensor& t = p.tensors[i];
    if (t.init == tensor_init::by_name) continue;
    // "transformer.h.3.mlp.fc_w" -> "mlp.fc_w": the module and the member.
    const std::string_view name = t.name;
    const size_t member = name.rfind('.');
    const size_t module = member == std::string_view::npos || member == 0
                              ? std::string_view::npos
                              : name.rfind('.', member - 1);
    const std::string what =
        fmt::format("{} {}", name.substr(module == std::string_view::npos ? 0 : module + 1),
                    t.init == tensor_init::zeros  ? std::string("zeros")
                    : t.init == tensor_init::ones ? std::string("ones")
                                                  : fmt::format("normal({:g})", t.init_std));
    if (std::find(seen.begin(), seen.end(), what) == seen.end()) seen.push_back(what);
  }
  if (!seen.empty())
    out += fmt::format("; custom layers as their headers declare: {}", fmt::join(seen, ", "));
  return out;
}
