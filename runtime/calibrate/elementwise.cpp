// elementwise: one op over `elems` elements, with the hyper-parameters of a
// typical run (they do not change the work done).
#include "runtime/calibrate/elementwise.h"

#include <random>

#include "runtime/calibrate/buffers.h"
#include "runtime/cpu/step.h"
#include "runtime/optimizer.h"

namespace {

using fsdpgen::profile::ElementwiseTime;

constexpr float kLr = 1e-4f, kBeta1 = 0.9f, kBeta2 = 0.95f, kEps = 1e-8f, kWeightDecay = 0.1f;
constexpr float kMomentum = 0.9f;

// n values of dtype t, N(0, stddev).
host_buffer random_values(int64_t n, dtype_id t, float stddev, std::mt19937& rng) {
  host_buffer b(n * dtype_size(t));
  fill_normal(b.data(), t, n, stddev, rng);
  return b;
}

}  // namespace

measurement measure_elementwise(const ElementwiseTime& e, const measure_options& o) {
  std::mt19937 rng(1234);
  const int64_t n = e.elems;
  const dtype_id t = dtype_named(e.dtype);
  host_buffer master = random_values(n, dtype_id::fp32, 0.02f, rng);
  float* w = master.as<float>();
  if (e.op == "convert") {
    host_buffer params(n * dtype_size(t));
    return measure(o, [&] {
      return seconds_of([&] { tensor_convert(params.data(), t, w, dtype_id::fp32, n, false); });
    });
  }
  host_buffer grad = random_values(n, t, 1e-3f, rng);
  if (e.op == "grad_norm") {
    step_context c;
    return measure(o,
                   [&] { return seconds_of([&] { step_add_grad_norm(c, grad.data(), t, n); }); });
  }
  if (e.op == "sgd") {
    host_buffer momentum(n * 4);
    return measure(o, [&] {
      return seconds_of([&] {
        optimizer_sgd(w, momentum.as<float>(), grad.data(), t, 0, n, kLr, kMomentum, kWeightDecay,
                      true, false, 1.0f);
      });
    });
  }
  host_buffer m(n * 4), v(n * 4);  // adamw
  int64_t step = 1;
  return measure(o, [&] {
    return seconds_of([&] {
      optimizer_adamw(w, m.as<float>(), v.as<float>(), grad.data(), t, 0, n, kLr, kBeta1, kBeta2,
                      kEps, kWeightDecay, true, step++, 1.0f);
    });
  });
}
