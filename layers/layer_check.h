// layer_check: the checks `fsdpgen check-layer` runs on a custom layer
// (layers/fsdpgen_layer.h), compiled with the layer's header into a small
// program (cli/CheckLayer.cpp writes its main). Every member, the input, the
// output and their gradients get a mapping of their own: the elements end
// within 64 bytes of an inaccessible guard page (another one before them),
// the bytes between are canaries, and each call runs with the arrays it may
// not write read-only (or inaccessible, for Scratch during forward). Then:
// writes stay inside what each call may write, forward writes all of y and
// backward all of dx, backward adds to (not replaces) the gradients, every
// gradient equals central finite differences of forward, two runs agree bit
// for bit, and a 16-bit instance agrees with the reference one.
//
// A fault prints the member and a line `@frames MODULE+0xOFFSET ...` that
// fsdpgen turns into file and line; the program then exits 1.
#pragma once

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "layers/fsdpgen_layer.h"
#include "runtime/dtype.h"
#include "runtime/gemm.h"

namespace fsdpgen::layer_check {

// What a mapping holds, which says who may write it and when.
enum class role { input, output, d_output, d_input, param, grad, saved, scratch, workspace };

inline const char* role_text(role r) {
  switch (r) {
    case role::input:
      return "the input x";
    case role::output:
      return "the output y";
    case role::d_output:
      return "the output's gradient dy";
    case role::d_input:
      return "the input's gradient dx";
    case role::param:
      return "a parameter";
    case role::grad:
      return "a gradient";
    case role::saved:
      return "a Saved array";
    case role::scratch:
      return "a Scratch array";
    case role::workspace:
      return "the GEMM workspace";
  }
  return "";
}

enum class phase { host, forward, backward };

inline const char* phase_text(phase p) {
  return p == phase::forward ? "forward" : p == phase::backward ? "backward" : "the check itself";
}

constexpr size_t kPage = 4096;
constexpr size_t kWorkspaceAlign = 64;
constexpr unsigned char kCanary = 0xa5;

// One member's elements in a mapping of their own, between two guard pages,
// the bytes around them canaries. Two layouts: the elements end at the
// second guard page (so the first element past them faults at the writing
// line), or start at the first (the element before them faults). The GEMM
// workspace stays 64-byte aligned.
enum class layout { end_at_guard, start_at_guard };
struct region {
  std::string name;      // "fc_w", "fc_w.grad", "pre", "x", ...
  std::string declared;  // "\"d_ff / 2\" = 10 per token x 6 tokens"
  role what = role::input;
  std::byte* map = nullptr;
  size_t map_bytes = 0;
  std::byte* body = nullptr;  // the accessible pages
  size_t body_bytes = 0;
  std::byte* data = nullptr;  // the elements
  size_t bytes = 0;
};

// The program's regions, for the fault handler (a deque: references to them
// stay valid as more are mapped).
inline std::deque<region>& regions() {
  static std::deque<region> all;
  return all;
}
inline phase& current_phase() {
  static phase p = phase::host;
  return p;
}

inline void say(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

inline std::string hex(uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// The line fsdpgen symbolizes: each frame as MODULE+0xOFFSET.
inline void print_frames(void* const* pcs, int n) {
  std::string line = "@frames";
  for (int i = 0; i < n; ++i) {
    Dl_info info{};
    if (dladdr(pcs[i], &info) == 0 || !info.dli_fname) continue;
    const uintptr_t off = reinterpret_cast<uintptr_t>(pcs[i]) -
                          reinterpret_cast<uintptr_t>(info.dli_fbase) - (i > 0 ? 1 : 0);
    line += " " + std::string(info.dli_fname) + "+" + hex(off);
  }
  say(line + "\n");
}

// What each call may write; everything else is read-only or, for what the
// call is not given, inaccessible.
inline int protection(role r, phase p) {
  if (p == phase::host) return PROT_READ | PROT_WRITE;
  const bool fwd = p == phase::forward;
  switch (r) {
    case role::input:
    case role::param:
      return PROT_READ;
    case role::output:
      return fwd ? PROT_READ | PROT_WRITE : PROT_NONE;
    case role::saved:
      return fwd ? PROT_READ | PROT_WRITE : PROT_READ;
    case role::d_output:
      return fwd ? PROT_NONE : PROT_READ;
    case role::d_input:
    case role::scratch:
      return fwd ? PROT_NONE : PROT_READ | PROT_WRITE;
    case role::grad:
      return fwd ? PROT_READ : PROT_READ | PROT_WRITE;
    case role::workspace:
      return PROT_READ | PROT_WRITE;
  }
  return PROT_NONE;
}

inline void enter(phase p) {
  for (const region& r : regions())
    if (mprotect(r.body, r.body_bytes, protection(r.what, p)) != 0) {
      say("check-layer: error: mprotect failed: " + std::string(std::strerror(errno)) + "\n");
      std::_Exit(3);
    }
  current_phase() = p;
}

// What may be written in the phase, in words, for a fault's message.
inline std::string allowed(phase p) {
  return p == phase::forward
             ? "forward may write only y and its Saved arrays (and the GEMM workspace)"
             : "backward may write only dx, its Scratch arrays and the gradients (and the GEMM "
               "workspace)";
}

inline void on_fault(int sig, siginfo_t* info, void* context) {
  const auto* at = static_cast<const std::byte*>(info->si_addr);
  bool write = true;
  void* pc = nullptr;
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(context);
  write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
  pc = reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
#else
  (void)context;
#endif
  const char* verb = write ? "wrote" : "read";
  const char* in = phase_text(current_phase());
  std::string msg;
  for (const region& r : regions()) {
    if (at < r.map || at >= r.map + r.map_bytes) continue;
    if (at < r.body) {
      msg = std::string(in) + " " + verb + " " + std::to_string(r.data - at) +
            " bytes before the start of '" + r.name + "' (" + role_text(r.what) + ", " +
            r.declared + ")";
    } else if (at >= r.body + r.body_bytes) {
      msg = std::string(in) + " " + verb + " past the end of '" + r.name + "' (" +
            role_text(r.what) + ", " + r.declared + ", " + std::to_string(r.bytes) + " bytes)";
    } else {
      msg = std::string(in) + " " + verb + " '" + r.name + "' (" + role_text(r.what) + "), which " +
            (write ? allowed(current_phase())
                   : std::string(in) + " is not given: " + allowed(current_phase()));
      if (r.what == role::scratch && current_phase() == phase::forward)
        msg +=
            "; Scratch arrays are set for backward calls only: keep what backward needs "
            "in a Saved array";
    }
    break;
  }
  if (msg.empty())
    msg = std::string(in) + " " + verb + " address " + hex(reinterpret_cast<uintptr_t>(at)) +
          ", outside every buffer the layer is given (signal " + std::to_string(sig) + ")";
  say("FAIL  memory: " + msg + "\n");
  // The faulting instruction, then its callers: backtrace's frames after the
  // one at that instruction (before it: this handler and the trampoline).
  void* frames[64];
  const int n = backtrace(frames, 64);
  void* pcs[65];
  int k = 0;
  if (pc) pcs[k++] = pc;
  int from = std::min(n, 2);
  for (int i = 0; i < n; ++i)
    if (frames[i] == pc) from = i + 1;
  for (int i = from; i < n; ++i)
    pcs[k++] = frames[i];
  print_frames(pcs, k);
  say("check-layer: 1 check failed\n");
  std::_Exit(1);
}

inline void install_fault_handler() {
  static std::vector<char> stack(1 << 16);
  stack_t ss{};
  ss.ss_sp = stack.data();
  ss.ss_size = stack.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc now, not in the handler
}

// A region of `bytes` (at least 1), its canaries set, elements zero.
inline layout& current_layout() {
  static layout l = layout::end_at_guard;
  return l;
}

inline region& map_region(std::string name, std::string declared, role what, size_t bytes) {
  region r;
  r.name = std::move(name);
  r.declared = std::move(declared);
  r.what = what;
  r.bytes = bytes;
  const size_t align = what == role::workspace ? kWorkspaceAlign : 1;
  const size_t used = (bytes + align - 1) / align * align;
  r.body_bytes = (used + kPage - 1) / kPage * kPage;
  r.map_bytes = r.body_bytes + 2 * kPage;
  void* m = mmap(nullptr, r.map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    say("check-layer: error: cannot map " + std::to_string(r.map_bytes) + " bytes for '" + r.name +
        "': " + std::strerror(errno) + "\n");
    std::_Exit(3);
  }
  r.map = static_cast<std::byte*>(m);
  r.body = r.map + kPage;
  r.data = current_layout() == layout::start_at_guard ? r.body : r.body + r.body_bytes - used;
  mprotect(r.body, r.body_bytes, PROT_READ | PROT_WRITE);
  std::memset(r.body, kCanary, r.body_bytes);
  std::memset(r.data, 0, bytes);
  regions().push_back(std::move(r));
  return regions().back();
}

// The first region whose canaries changed, as a message; "" when none did.
// Without `before`, only canaries past the end count (a write before an
// array is then left to the layout that faults at it).
inline std::string overwritten_canaries(bool before = true) {
  for (const region& r : regions()) {
    const std::byte* end = r.body + r.body_bytes;
    for (const std::byte* p = r.data + r.bytes; p < end; ++p)
      if (*p != std::byte{kCanary})
        return "wrote past the end of '" + r.name + "' (" + role_text(r.what) + ", " + r.declared +
               ", " + std::to_string(r.bytes) + " bytes): byte " + std::to_string(p - r.data) +
               " changed";
    for (const std::byte* p = r.body; before && p < r.data; ++p)
      if (*p != std::byte{kCanary})
        return "wrote before the start of '" + r.name + "' (" + role_text(r.what) + ", " +
               r.declared + "): byte -" + std::to_string(r.data - p) + " changed";
  }
  return "";
}

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

inline std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
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
    std::string msg =
        "gradient " + name + ": " + std::to_string(bad) + " of " + std::to_string(at.size()) +
        " checked elements (of " + std::to_string(g.size()) + ") differ; the worst, [" +
        std::to_string(worst_i) + "], is " + sci(worst_g) + " against " + sci(worst_fd);
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
