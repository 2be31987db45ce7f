// layer_check: the checks `fsdpgen check-layer` runs on a custom layer
// (layers/fsdpgen_layer.h), compiled with the layer's header into a small
// program (codegen/cli/CheckLayer.cpp writes its main). Every member, the input, the
// output and their gradients get a guarded mapping of their own
// (layers/layer_check_regions.h), bound to an instance of the layer
// (layers/layer_check_instance.h). Then: writes stay inside what each call
// may write, forward writes all of y and backward all of dx, backward adds
// to (not replaces) the gradients, every gradient equals central finite
// differences of forward, two runs agree bit for bit, and a 16-bit instance
// agrees with the reference one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "layers/layer_check_instance.h"
#include "layers/layer_check_regions.h"

namespace fsdpgen::layer_check {

// The report: one line per check, and the count of failures.
struct report {
  int failed = 0;
  void line(bool ok, const std::string& what) {
    failed += !ok;
    say(std::string(ok ? "ok    " : "FAIL  ") + what + "\n");
  }
  void note(const std::string& what) { say("note  " + what + "\n"); }
  // The last line; the exit status.
  int summary() const {
    say(failed == 0 ? "check-layer: all checks passed\n"
                    : "check-layer: " + std::to_string(failed) + " check" +
                          (failed == 1 ? "" : "s") + " failed\n");
    return failed == 0 ? 0 : 1;
  }
};

inline std::string sci(double v, int digits = 1) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*e", digits, v);
  return buf;
}

// Values shared by every instance: the reference draws them, the 16-bit
// instance rounds them.
struct values {
  std::vector<double> x, r;                 // input and dloss/dy
  std::vector<std::vector<double>> params;  // per Param
};

template <class T, class G, template <class, class> class L>
void load(instance<L, T, G>& in, const values& v, double grad_start) {
  for (size_t i = 0; i < v.x.size(); ++i) {
    in.x.data()[i] = of_double<T>(v.x[i]);
    in.dy.data()[i] = of_double<T>(v.r[i]);
  }
  for (size_t p = 0; p < v.params.size(); ++p) {
    for (size_t i = 0; i < v.params[p].size(); ++i)
      in.b.params[p].value.data()[i] = of_double<T>(v.params[p][i]);
    in.b.params[p].grad.fill(of_double<G>(grad_start));
  }
  in.y.fill(quiet_nan<T>());
  in.dx.fill(quiet_nan<T>());
}

inline void poison(const std::vector<member_array>& arrays) {
  for (const member_array& a : arrays)
    fill_nan(a);
}

// Elements of an array a check samples: all of a small one, else 48 spread
// over it (first and last included).
inline std::vector<size_t> sample(size_t n) {
  std::vector<size_t> out;
  const size_t k = std::min<size_t>(n, 48);
  for (size_t j = 0; j < k; ++j)
    out.push_back(k == 1 ? 0 : j * (n - 1) / (k - 1));
  return out;
}

template <class T>
size_t count_nan(const array<T>& a) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    n += std::isnan(as_double(a.data()[i]));
  return n;
}
// loss = sum(y * r), in double.
template <class T, class G, template <class, class> class L>
double loss(instance<L, T, G>& in, const values& v) {
  in.forward();
  double s = 0;
  for (size_t i = 0; i < v.r.size(); ++i)
    s += as_double(in.y.data()[i]) * v.r[i];
  return s;
}

// Every check on the reference instance (T = R) and, with N not void, the
// 16-bit one; the exit status.
template <template <class, class> class L, class Bind, class R, class N>
int check_main(const layer_info& info, const Bind& bind) {
  install_fault_handler();
  const bool exact = std::is_same_v<R, double>;
  say("check-layer " + std::string(info.layer) + " from " + info.header + ": " +
      std::to_string(info.tokens) + " tokens of width " + std::to_string(info.width) +
      ", reference instance " + info.layer + "<" + info.reference + ", " + info.reference + ">\n");
  report rep;
  instance<L, R, R> ref(info, bind, "");

  std::mt19937_64 rng(20261126);
  std::normal_distribution<double> normal(0.0, 1.0);
  values v;
  const size_t acts = ref.x.size();
  for (size_t i = 0; i < acts; ++i)
    v.x.push_back(normal(rng));
  for (size_t i = 0; i < acts; ++i)
    v.r.push_back(normal(rng));
  for (const auto& p : ref.b.params) {
    v.params.emplace_back();
    for (size_t i = 0; i < p.value.size(); ++i)
      v.params.back().push_back(0.3 * normal(rng));
  }
  // Gradients start here, not at zero: backward must add to them.
  constexpr double kGradStart = 0.25;

  // 1. Memory: each call writes only what it may, within bounds; then again
  // with every array starting at its guard page, for writes before one.
  load(ref, v, kGradStart);
  poison(ref.b.saved);
  ref.forward();
  std::string over = overwritten_canaries(false);
  rep.line(over.empty(), over.empty() ? "memory: forward writes only y and its Saved arrays, in "
                                        "bounds"
                                      : "memory: forward " + over);
  if (!over.empty()) return rep.summary();
  poison(ref.b.scratch);
  ref.backward();
  over = overwritten_canaries(false);
  rep.line(over.empty(), over.empty() ? "memory: backward writes only dx, its Scratch arrays and "
                                        "the gradients, in bounds"
                                      : "memory: backward " + over);
  if (!over.empty()) return rep.summary();
  {
    current_layout() = layout::start_at_guard;
    instance<L, R, R> low(info, bind, "");
    current_layout() = layout::end_at_guard;
    for (const region& r : regions())  // the first pass's writes before its arrays
      std::memset(r.body, kCanary, static_cast<size_t>(r.data - r.body));
    load(low, v, kGradStart);
    low.forward();
    low.backward();
    over = overwritten_canaries();
    rep.line(over.empty(), over.empty() ? "memory: no call writes before the start of an array"
                                        : "memory: a call " + over);
    if (!over.empty()) return rep.summary();
  }

  // 2. Coverage: y and dx overwritten whole; unused Saved and Scratch noted.
  const size_t y_nan = count_nan(ref.y), dx_nan = count_nan(ref.dx);
  rep.line(y_nan == 0, y_nan == 0 ? "output: forward writes every element of y"
                                  : "output: " + std::to_string(y_nan) + " of " +
                                        std::to_string(ref.y.size()) +
                                        " elements of y are NaN after forward (filled with NaN "
                                        "before: unwritten, or computed from a Saved or Scratch "
                                        "element read before it was written)");
  rep.line(dx_nan == 0, dx_nan == 0 ? "output: backward writes every element of dx"
                                    : "output: " + std::to_string(dx_nan) + " of " +
                                          std::to_string(ref.dx.size()) +
                                          " elements of dx are NaN after backward (dx is filled "
                                          "with NaN before: backward must overwrite it, not add "
                                          "to it)");
  for (const member_array& a : ref.b.saved)
    if (size_t n = count_nan(a); n)
      rep.note("Saved '" + a.name + "': forward leaves " + std::to_string(n) + " of " +
               std::to_string(elems(a)) + " elements unwritten (declared larger than it is used?)");
  for (const member_array& a : ref.b.scratch)
    if (size_t n = count_nan(a); n)
      rep.note("Scratch '" + a.name + "': backward leaves " + std::to_string(n) + " of " +
               std::to_string(elems(a)) + " elements unwritten (declared larger than it is used?)");

  // 3. Gradients against central differences of forward's sum(y * r).
  const double h = exact ? 1e-6 : 1e-2, atol = exact ? 1e-6 : 2e-3, rtol = exact ? 1e-5 : 1e-2;
  say("      gradients against central differences (h = " + sci(h) + ", |g - fd| <= " + sci(atol) +
      " + " + sci(rtol) + " |fd|)\n");
  std::vector<std::vector<double>> analytic;  // dx, then each parameter's added gradient
  {
    std::vector<double> d;
    for (size_t i = 0; i < ref.dx.size(); ++i)
      d.push_back(as_double(ref.dx.data()[i]));
    analytic.push_back(d);
    for (const auto& p : ref.b.params) {
      std::vector<double> g;
      for (size_t i = 0; i < p.grad.size(); ++i)
        g.push_back(as_double(p.grad.data()[i]) - kGradStart);
      analytic.push_back(g);
    }
  }
  auto check_gradient = [&](const std::string& name, R* values_of, const std::vector<double>& g,
                            bool is_param) {
    double worst = 0, worst_fd = 0, worst_g = 0;
    size_t worst_i = 0, bad = 0;
    const std::vector<size_t> at = sample(g.size());
    bool overwrote = is_param;
    for (size_t i : at) {
      const R keep = values_of[i];
      values_of[i] = keep + static_cast<R>(h);
      const double up = loss(ref, v);
      values_of[i] = keep - static_cast<R>(h);
      const double down = loss(ref, v);
      values_of[i] = keep;
      const double fd = (up - down) / (2 * h);
      const double err = std::abs(g[i] - fd);
      const bool ok = err <= atol + rtol * std::abs(fd);
      bad += !ok;
      overwrote &= std::abs(g[i] + kGradStart - fd) <= atol + rtol * std::abs(fd);
      if (!(err <= worst)) worst = err, worst_fd = fd, worst_g = g[i], worst_i = i;
    }
    const std::string counted = std::to_string(at.size()) + " of " + std::to_string(g.size());
    if (bad == 0) {
      rep.line(true, "gradient " + name + ": " + counted + " elements, max |g - fd| " + sci(worst));
      return;
    }
    std::string msg = "gradient " + name + ": " + std::to_string(bad) + " of " +
                      std::to_string(at.size()) + " checked elements (of " +
                      std::to_string(g.size()) + ") differ; the worst, [" +
                      std::to_string(worst_i) + "], is " + sci(worst_g, 6) + " against " +
                      sci(worst_fd, 6) + ": off by " + sci(worst) + " where " +
                      sci(atol + rtol * std::abs(worst_fd)) + " is allowed";
    if (overwrote && is_param) msg += " (backward overwrites this gradient; it must add to it)";
    rep.line(false, msg);
  };
  check_gradient("dx", ref.x.data(), analytic[0], false);
  for (size_t p = 0; p < ref.b.params.size(); ++p)
    check_gradient(ref.b.params[p].name + ".grad", ref.b.params[p].value.data(), analytic[p + 1],
                   true);

  // 4. Determinism: a second forward and backward from the same values.
  auto outputs = [&]() {
    std::vector<double> out;
    for (size_t i = 0; i < ref.y.size(); ++i)
      out.push_back(as_double(ref.y.data()[i]));
    for (size_t i = 0; i < ref.dx.size(); ++i)
      out.push_back(as_double(ref.dx.data()[i]));
    for (const auto& p : ref.b.params)
      for (size_t i = 0; i < p.grad.size(); ++i)
        out.push_back(as_double(p.grad.data()[i]));
    return out;
  };
  auto run_once = [&]() {
    load(ref, v, kGradStart);
    poison(ref.b.saved);
    ref.forward();
    poison(ref.b.scratch);
    ref.backward();
    return outputs();
  };
  const std::vector<double> first = run_once();
  const std::vector<double> second = run_once();
  size_t differ = 0;
  for (size_t i = 0; i < first.size(); ++i)
    differ += std::memcmp(&first[i], &second[i], sizeof(double)) != 0;
  rep.line(differ == 0, differ == 0 ? "determinism: two runs agree bit for bit"
                                    : "determinism: " + std::to_string(differ) + " of " +
                                          std::to_string(first.size()) +
                                          " values of y, dx and the gradients differ between "
                                          "two runs from the same values");

  // 5. The 16-bit instance against the reference one.
  if constexpr (!std::is_void_v<N>) {
    instance<L, N, float> n(info, bind, " (" + std::string(info.narrow) + ")");
    load(n, v, kGradStart);
    poison(n.b.saved);
    n.forward();
    poison(n.b.scratch);
    n.backward();
    over = overwritten_canaries();
    rep.line(over.empty(),
             over.empty()
                 ? std::string("memory: the ") + info.narrow + " instance's calls stay in bounds"
                 : std::string("memory: the ") + info.narrow + " instance " + over);
    const double tol = std::is_same_v<N, bf16> ? 5e-2 : 1e-2;
    auto compare = [&](const std::string& name, auto get_n, auto get_ref, size_t count) {
      double peak = 0, err = 0;
      size_t at = 0;
      for (size_t i = 0; i < count; ++i)
        peak = std::max(peak, std::abs(get_ref(i)));
      for (size_t i = 0; i < count; ++i) {
        const double e = std::abs(get_n(i) - get_ref(i));
        if (!(e <= err)) err = e, at = i;
      }
      const double rel = peak > 0 ? err / peak : err;
      rep.line(rel <= tol, std::string(info.narrow) + " " + name + ": max error " + sci(rel) +
                               " of its largest value (tolerance " + sci(tol) + ")" +
                               (rel <= tol ? "" : ", at [" + std::to_string(at) + "]"));
    };
    compare(
        "y", [&](size_t i) { return as_double(n.y.data()[i]); }, [&](size_t i) { return first[i]; },
        ref.y.size());
    compare(
        "dx", [&](size_t i) { return as_double(n.dx.data()[i]); },
        [&](size_t i) { return first[ref.y.size() + i]; }, ref.dx.size());
    size_t off = ref.y.size() + ref.dx.size();
    for (size_t p = 0; p < ref.b.params.size(); ++p) {
      const auto& g = n.b.params[p].grad;
      compare(
          ref.b.params[p].name + ".grad",
          [&](size_t i) { return as_double(g.data()[i]) - kGradStart; },
          [&, off](size_t i) { return first[off + i] - kGradStart; }, g.size());
      off += g.size();
    }
  }
  return rep.summary();
}

}  // namespace fsdpgen::layer_check
