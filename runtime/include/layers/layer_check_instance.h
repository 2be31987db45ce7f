// layer_check_instance: one instance of a custom layer on guarded regions
// (layers/layer_check_regions.h), as `fsdpgen check-layer` runs it
// (layers/layer_check.h): the members bound to regions, typed views, and
// the NaN fills that show which elements a call wrote.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "layers/fsdpgen_layer.h"
#include "layers/layer_check_regions.h"
#include "runtime/cpu/gemm.h"
#include "runtime/dtype.h"

namespace fsdpgen::layer_check {

// Element conversions for any T the layer is instantiated with.
inline double as_double(double v) {
  return v;
}
inline double as_double(float v) {
  return v;
}
inline double as_double(bf16 v) {
  return bf16_to_float(v);
}
inline double as_double(fp16 v) {
  return fp16_to_float(v);
}
template <class T>
T of_double(double v) {
  if constexpr (std::is_same_v<T, double>)
    return v;
  else
    return from_float<T>(static_cast<float>(v));
}
template <class T>
T quiet_nan() {
  return of_double<T>(std::nan(""));
}

// A Saved or Scratch member's elements: their type decides what NaN is.
enum class elem { f64, f32, b16, f16 };
template <class E>
constexpr elem elem_of() {
  if constexpr (std::is_same_v<E, double>)
    return elem::f64;
  else if constexpr (std::is_same_v<E, float>)
    return elem::f32;
  else if constexpr (std::is_same_v<E, bf16>)
    return elem::b16;
  else
    return elem::f16;
}
struct member_array {
  std::string name;
  region* r = nullptr;
  elem type = elem::f32;
};

// NaN in every element (before forward for Saved arrays, before backward for
// Scratch ones), and how many are still NaN after the call.
inline void fill_nan(const member_array& a) {
  std::byte* p = a.r->data;
  std::byte* end = a.r->data + a.r->bytes;
  switch (a.type) {
    case elem::f64:
      std::fill(reinterpret_cast<double*>(p), reinterpret_cast<double*>(end), std::nan(""));
      break;
    case elem::f32:
      std::fill(reinterpret_cast<float*>(p), reinterpret_cast<float*>(end), std::nanf(""));
      break;
    case elem::b16:
      std::fill(reinterpret_cast<uint16_t*>(p), reinterpret_cast<uint16_t*>(end), uint16_t{0x7fc0});
      break;
    case elem::f16:
      std::fill(reinterpret_cast<uint16_t*>(p), reinterpret_cast<uint16_t*>(end), uint16_t{0x7e00});
      break;
  }
}
inline size_t elem_bytes(elem e) {
  return e == elem::f64 ? 8 : e == elem::f32 ? 4 : 2;
}
inline size_t count_nan(const member_array& a) {
  size_t n = 0;
  const std::byte* p = a.r->data;
  for (size_t i = 0; i < a.r->bytes / elem_bytes(a.type); ++i) {
    switch (a.type) {
      case elem::f64:
        n += std::isnan(reinterpret_cast<const double*>(p)[i]);
        break;
      case elem::f32:
        n += std::isnan(reinterpret_cast<const float*>(p)[i]);
        break;
      case elem::b16: {
        const uint16_t b = reinterpret_cast<const uint16_t*>(p)[i];
        n += (b & 0x7f80) == 0x7f80 && (b & 0x7f);
        break;
      }
      case elem::f16: {
        const uint16_t b = reinterpret_cast<const uint16_t*>(p)[i];
        n += (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
        break;
      }
    }
  }
  return n;
}
inline size_t elems(const member_array& a) {
  return a.r->bytes / elem_bytes(a.type);
}

// A typed view of a region.
template <class T>
struct array {
  region* r = nullptr;
  T* data() const { return reinterpret_cast<T*>(r->data); }
  size_t size() const { return r->bytes / sizeof(T); }
  void fill(T v) const { std::fill(data(), data() + size(), v); }
};

// The layer's members bound to regions: what the generated bind function calls.
template <class T, class G>
struct bindings {
  std::string suffix;  // " (bf16)" for a second instance's names
  struct param_arrays {
    std::string name;
    array<T> value;
    array<G> grad;
  };
  std::vector<param_arrays> params;
  std::vector<member_array> saved, scratch;

  template <class P>
  void param(P& p, const char* name, int64_t elems, const char* declared) {
    param_arrays a{
        name,
        {&map_region(name + suffix, declared, role::param, sizeof(T) * static_cast<size_t>(elems))},
        {&map_region(std::string(name) + ".grad" + suffix, declared, role::grad,
                     sizeof(G) * static_cast<size_t>(elems))}};
    p.value = a.value.data();
    p.grad = a.grad.data();
    params.push_back(a);
  }
  template <class A>
  void array_member(A& m, role what, const char* name, int64_t per_token, int64_t tokens,
                    const char* declared) {
    using E = std::remove_pointer_t<decltype(m.data)>;
    region& r = map_region(name + suffix,
                           std::string(declared) + " per token x " + std::to_string(tokens) +
                               " tokens = " + std::to_string(per_token * tokens) + " elements",
                           what, sizeof(E) * static_cast<size_t>(per_token * tokens));
    m.data = reinterpret_cast<E*>(r.data);
    (what == role::saved ? saved : scratch).push_back({name, &r, elem_of<E>()});
  }
  template <class A>
  void saved_member(A& m, const char* name, int64_t per_token, int64_t tokens,
                    const char* declared) {
    array_member(m, role::saved, name, per_token, tokens, declared);
  }
  template <class A>
  void scratch_member(A& m, const char* name, int64_t per_token, int64_t tokens,
                      const char* declared) {
    array_member(m, role::scratch, name, per_token, tokens, declared);
  }
};

// The facts fsdpgen evaluated from the header and the command line.
struct layer_info {
  const char* layer;   // "GeluMlp"
  const char* header;  // as given
  int64_t width;       // d_in = d_out
  int64_t tokens;
  const char* reference;  // "double" or "float": the reference instance's T
  const char* narrow;     // "bf16", "fp16" or "" (no 16-bit comparison)
};

// One instance of the layer on regions of its own.
template <template <class, class> class L, class T, class G>
struct instance {
  L<T, G> layer{};
  bindings<T, G> b;
  array<T> x, y, dy, dx;
  array<float> ws;
  int64_t tokens = 0;

  template <class Bind>
  instance(const layer_info& info, const Bind& bind, const std::string& suffix) {
    tokens = info.tokens;
    b.suffix = suffix;
    const size_t acts = sizeof(T) * static_cast<size_t>(info.width * info.tokens);
    const std::string shape =
        "(" + std::to_string(info.tokens) + ", " + std::to_string(info.width) + ")";
    x = {&map_region("x" + suffix, shape, role::input, acts)};
    y = {&map_region("y" + suffix, shape, role::output, acts)};
    dy = {&map_region("dy" + suffix, shape, role::d_output, acts)};
    dx = {&map_region("dx" + suffix, shape, role::d_input, acts)};
    ws = {&map_region("the GEMM workspace" + suffix, "fsdpgen's", role::workspace,
                      static_cast<size_t>(kCpuGemmWorkspaceBytes))};
    bind(layer, b, info.tokens);
  }

  layer::Cpu cpu() const {
    return layer::Cpu{gemm_workspace{ws.data(), static_cast<int64_t>(ws.size())}};
  }
  void forward() {
    enter(phase::forward);
    layer.forward(x.data(), y.data(), tokens, cpu());
    enter(phase::host);
  }
  void backward() {
    enter(phase::backward);
    layer.backward(x.data(), dy.data(), dx.data(), tokens, cpu());
    enter(phase::host);
  }
};

}  // namespace fsdpgen::layer_check
