// OpWriter: one op of the schedule being written as a function: its
// statements (Body: named pointers into the arena, then calls) and the
// target's vocabulary for it. Both targets get the same schedule in the
// same words; the CUDA runtime's calls are the CPU runtime's names with the
// op's gpu_exec last (runtime/cuda/step.h), so gtail() and ws() are where
// the two vocabularies differ.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "codegen/emit/CppText.h"
#include "codegen/emit/EmitContext.h"

namespace fsdpgen::emit {

// A place in the arena: bytes into a buffer of the schedule (-1: none, nullptr).
struct At {
  int buffer = -1;
  int64_t bytes = 0;
};

// The statements of an op, or of one layer's scope in it: first the named
// pointers its calls take (each with the buffer it points into), then the
// calls; `names` are the pointers declared.
struct Body {
  std::string indent = "  ";
  std::string decls, calls;
  std::set<std::string> names;
  std::string text() const { return decls + calls; }
};

// Appends a statement (with the body's indent and a newline) to the calls.
template <class... Args>
void call(Body& body, fmt::format_string<Args...> f, Args&&... args) {
  body.calls += wrap_line(body.indent + fmt::format(f, std::forward<Args>(args)...), "    ") + "\n";
}

class OpWriter {
 public:
  OpWriter(const EmitContext& ctx, ProgramNotes& notes, const Op& op);

  const EmitContext& ctx;
  ProgramNotes& notes;
  const Op& op;

  // Declares `type* name` at `at` in body and returns the name ("nullptr" for no buffer).
  std::string let(Body& body, const std::string& name, const std::string& type, At at) const;
  std::string let_bytes(Body& body, const std::string& name, At at) const {
    return let(body, name, "std::byte", at);
  }
  // Declares the op's communicator as `comm` and returns the name.
  std::string comm(Body& body) const;

  // Whether the op runs on the GPU. A CUDA program runs some ops on the
  // host when it offloads (runs_on_host: the norm, the optimizer and
  // collectives of host memory); those are written in the CPU vocabulary
  // and listed in kHostOps, which the CUDA executor hands to its host worker.
  bool on_gpu() const { return ctx.cuda && !host_; }
  bool runs_on_host() const { return host_; }
  // The op's gpu_exec, `g`, declared at the top of the ops that take it.
  std::string gpu_exec() {
    uses_gpu_exec_ = true;
    return "g";
  }
  bool uses_gpu_exec() const { return uses_gpu_exec_; }
  // What kernels get last: the CPU's GEMM workspace, the GPU's gpu_exec.
  std::string ws() { return on_gpu() ? gpu_exec() : "c.ws"; }
  // What every other call gets last (nothing on the CPU).
  std::string gtail() { return on_gpu() ? ", " + gpu_exec() : ""; }
  std::string norm_partial() const {
    return on_gpu() ? "cuda_norm_partial(c)" : "&c.grad_norm_partial";
  }
  // n values from src (of dtype src_t) into buffer dst (dst_t), added with
  // `accumulate`. On a GPU, a conversion into host memory (offload) is a
  // kernel that writes it through unified addressing, or a copy when
  // nothing converts.
  void convert(Body& b, int dst, const std::string& dst_name, const std::string& dst_t,
               const std::string& src_name, const std::string& src_t, int64_t n, bool accumulate);

 private:
  bool host_ = false;
  bool uses_gpu_exec_ = false;
};

}  // namespace fsdpgen::emit
