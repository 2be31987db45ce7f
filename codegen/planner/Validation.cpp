// Validation: the step's prefix that is a forward pass of micro-batch 0.
#include "codegen/planner/Validation.h"

#include <fmt/format.h>

namespace fsdpgen {
namespace {

bool is_last_forward(const Schedule& s, const Op& op) {
  return op.kind == OpKind::Forward && op.micro_batch == 0 &&
         op.segment == static_cast<int>(s.units.segments.size()) - 1;
}

}  // namespace

ValidationPass validation_pass(const Schedule& s) {
  ValidationPass v;
  for (const Op& op : s.ops) {
    switch (op.kind) {
      case OpKind::AllGather:
        ++v.all_gathers;
        break;
      case OpKind::Forward:
        ++v.forwards;
        break;
      case OpKind::CopyH2D:
      case OpKind::CopyD2H:  // offloaded activations going to the host
        ++v.copies;
        break;
      case OpKind::Free:
        ++v.frees;
        break;
      default:
        ++v.other;
    }
    if (is_last_forward(s, op)) {
      v.op_count = op.id + 1;
      return v;
    }
  }
  return {};  // no loss forward: not a training step
}

std::string validation_pass_problem(const Schedule& s) {
  const ValidationPass v = validation_pass(s);
  if (v.op_count == 0) return "validation pass: the step has no forward of the last segment";
  std::vector<int> seen(s.units.segments.size(), 0);
  for (int i = 0; i < v.op_count; ++i) {
    const Op& op = s.ops[static_cast<size_t>(i)];
    if (op.kind == OpKind::Forward) {
      if (op.micro_batch != 0)
        return fmt::format("validation pass: op #{} {} is a forward of micro-batch {}", op.id,
                           op.label(), op.micro_batch);
      ++seen[static_cast<size_t>(op.segment)];
    } else if (op.kind != OpKind::AllGather && op.kind != OpKind::CopyH2D &&
               op.kind != OpKind::Free && !(op.kind == OpKind::CopyD2H && op.segment >= 0)) {
      return fmt::format(
          "validation pass: op #{} {} comes before the loss of micro-batch 0 but is not an "
          "all-gather, a forward, a copy of parameters or activations or a free",
          op.id, op.label());
    }
  }
  for (size_t seg = 0; seg < seen.size(); ++seg)
    if (seen[seg] != 1)
      return fmt::format("validation pass: segment {} runs forward {} times, not once", seg,
                         seen[seg]);
  return "";
}

std::string describe_validation_pass(const Schedule& s) {
  const ValidationPass v = validation_pass(s);
  std::string parts =
      fmt::format("{} all-gather{}, {} forward{}", v.all_gathers, v.all_gathers == 1 ? "" : "s",
                  v.forwards, v.forwards == 1 ? "" : "s");
  if (v.copies > 0) parts += fmt::format(", {} cop{}", v.copies, v.copies == 1 ? "y" : "ies");
  if (v.frees > 0) parts += fmt::format(", {} free{}", v.frees, v.frees == 1 ? "" : "s");
  return fmt::format(
      "validation pass: ops #0-#{} ({}): micro-batch 0's forward alone, no gradients, "
      "reduce-scatters or optimizer",
      v.op_count - 1, parts);
}

}  // namespace fsdpgen
