// layer_check_regions: the guarded memory of `fsdpgen check-layer`
// (layers/layer_check.h). Every member, the input, the output and their
// gradients get a mapping of their own: the elements end within 64 bytes of
// an inaccessible guard page (another one before them), the bytes between
// are canaries, and each call runs with the arrays it may not write
// read-only (or inaccessible, for Scratch during forward). A fault prints
// the member and a line `@frames MODULE+0xOFFSET ...` that fsdpgen turns
// into file and line; the program then exits 1.
#pragma once

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>

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

}  // namespace fsdpgen::layer_check
