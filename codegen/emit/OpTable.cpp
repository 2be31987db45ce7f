// OpTable: kOps, one row per op in issue order with its planned fields (from
// which the trace writes the op's JSON), the kDeps arrays of the ops on
// other streams each waits for, and kHostOps.
#include <fmt/format.h>

#include <iterator>

#include "codegen/emit/CppText.h"
#include "codegen/emit/Tables.h"
#include "codegen/planner/Cost.h"
#include "runtime/program.h"

namespace fsdpgen::emit {

namespace {

// The runtime's stream_id and comm_group enumerators are the planner's names
// (to_string); its op_kind enumerators are spelled out.
constexpr std::string_view kOpKindEnum[] = {
    "all_gather",     "forward",     "recompute",          "backward",    "reduce_scatter",
    "all_reduce",     "free",        "copy_h2d",           "copy_d2h",    "grad_norm",
    "optimizer_step", "muon_gather", "muon_orthogonalize", "muon_scatter"};
static_assert(std::size(kOpKindEnum) == kOpKindNames.size());

// The runtime's labels (runtime/program.h, which its traces write) are the planner's.
constexpr bool same_labels() {
  if (std::size(kOpKindLabels) != kOpKindNames.size()) return false;
  for (size_t k = 0; k < kOpKindNames.size(); ++k)
    if (std::string_view(kOpKindLabels[k]) != kOpKindNames[k]) return false;
  return true;
}
static_assert(same_labels(), "runtime/program.h's kOpKindLabels differ from kOpKindNames");

// One kOps row: the op's fields that differ from program_op's defaults.
std::string op_row(const EmitContext& c, const Op& op) {
  std::vector<Init> f = {
      {"id", std::to_string(op.id)},
      {"stream", fmt::format("stream_id::{}", to_string(op.stream))},
      {"kind", fmt::format("op_kind::{}", kOpKindEnum[static_cast<int>(op.kind)])},
      {"label", cpp_string(op.label())}};
  auto add = [&](const char* name, int64_t v, int64_t dflt) {
    if (v != dflt) f.push_back({name, std::to_string(v)});
  };
  add("unit", op.unit, -1);
  add("segment", op.segment, -1);
  add("micro_batch", op.micro_batch, -1);
  if (op.group != CommGroup::None)
    f.push_back({"group", fmt::format("comm_group::{}", to_string(op.group))});
  add("group_size", op.group_size, 1);
  add("payload_bytes", op.payload_bytes, 0);
  add("sent_bytes", op.sent_bytes(), 0);
  add("memory_bytes", op.memory_bytes, 0);
  if (op.flops != 0) f.push_back({"flops", cpp_double(op.flops)});
  if (const double t = op_seconds(c.s, op, c.hardware); t > 0)
    f.push_back({"predicted_s", fmt::format("{:.3e}", t)});
  if (!op.deps.empty()) {
    f.push_back({"deps", fmt::format("kDeps{}", op.id)});
    add("dep_count", static_cast<int64_t>(op.deps.size()), 0);
  }
  f.push_back({"run", op.kind == OpKind::Free ? "op_free" : fmt::format("op_{}", op.id)});
  return "    " + braced(f, 4) + ",\n";
}

}  // namespace

std::vector<int> host_ops(const EmitContext& c) {
  std::vector<int> ids;
  if (c.cuda)
    for (const Op& op : c.s.ops)
      if (runs_on_host(c.s, op)) ids.push_back(op.id);
  return ids;
}

std::string op_table(const EmitContext& c) {
  std::string out = "// Ops in issue order, with the ops on other streams they wait for.\n";
  std::string rows;
  for (const Op& op : c.s.ops) {
    out += int_array(fmt::format("kDeps{}", op.id), op.deps);
    rows += op_row(c, op);
  }
  out += "constexpr program_op kOps[] = {\n" + rows + "};\n\n";
  if (const std::vector<int> host = host_ops(c); !host.empty())
    out += "// Ops run on the host (offload), by the CUDA executor's host worker.\n" +
           int_array("kHostOps", host) + "\n";
  return out;
}

}  // namespace fsdpgen::emit
