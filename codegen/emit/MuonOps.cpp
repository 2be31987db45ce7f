// MuonOps: the bodies of optimizer = muon(...)'s ops (codegen/planner/Muon.h): the
// owners' gather of their matrices' gradients, Newton-Schulz, and the
// scatter of the updates (runtime/cpu/step.h's step_muon_*), and kMuonMatrices,
// the table they and the optimizer step read.
#include <fmt/format.h>

#include "codegen/emit/CppText.h"
#include "codegen/emit/OpBodies.h"
#include "codegen/emit/Tables.h"

namespace fsdpgen::emit {

std::string muon_gather_op(OpWriter& w) {
  Body b;
  const std::string c = w.comm(b);
  const std::string grads = w.let_bytes(b, "grads", {w.op.operand(Role::GradShard), 0});
  const std::string gathered = w.let_bytes(b, "gathered", {w.op.operand(Role::MuonGathered), 0});
  call(b, "step_muon_gather(c, {}, {}, {}, {}{});", w.op.unit, grads, gathered, c, w.gtail());
  return b.text();
}

std::string muon_orthogonalize_op(OpWriter& w) {
  Body b;
  const std::string grads = w.let_bytes(b, "grads", {w.op.operand(Role::GradShard), 0});
  const std::string gathered = w.let_bytes(b, "gathered", {w.op.operand(Role::MuonGathered), 0});
  const std::string momentum = w.let(b, "momentum", "float", {w.op.operand(Role::MuonMomentum), 0});
  const std::string ws = w.let_bytes(b, "workspace", {w.op.operand(Role::Workspace), 0});
  const std::string update = w.let(b, "update", "float", {w.op.operand(Role::MuonUpdate), 0});
  call(b, "step_muon_orthogonalize(c, {}, {}, {}, {}, {}, {}{});", w.op.unit, grads, gathered,
       momentum, ws, update, w.gtail());
  return b.text();
}

std::string muon_scatter_op(OpWriter& w) {
  Body b;
  const std::string c = w.comm(b);
  const std::string gathered = w.let_bytes(b, "gathered", {w.op.operand(Role::MuonGathered), 0});
  const std::string update = w.let(b, "update", "float", {w.op.operand(Role::MuonUpdate), 0});
  call(b, "step_muon_scatter(c, {}, {}, {}, {}{});", w.op.unit, gathered, update, c, w.gtail());
  return b.text();
}

std::string muon_table(const EmitContext& c) {
  const MuonPlan& plan = c.s.muon;
  if (plan.matrices.empty()) return "";
  std::string out =
      "// Muon's matrices: unit, offset in its flat parameter, rows, cols, stored (in, out);\n"
      "// owner in the shard group, where it keeps the momentum and the gathered matrix.\n";
  out += "constexpr program_muon_matrix kMuonMatrices[] = {\n";
  for (size_t u = 0; u < plan.matrices.size(); ++u)
    for (size_t k = 0; k < plan.matrices[u].size(); ++k) {
      const MuonMatrix& m = plan.matrices[u][k];
      const MuonOwner& o = plan.owners[u].matrices[k];
      out += fmt::format("    {{{}, {}, {}, {}, {}, {}, {}, {}}},  // {}\n", u, m.offset_elems,
                         m.rows, m.cols, m.stored_transposed, o.owner, o.momentum_offset,
                         o.gathered_offset, m.name);
    }
  return out + "};\n\n";
}

int muon_matrix_count(const EmitContext& c) {
  int n = 0;
  for (const auto& m : c.s.muon.matrices)
    n += static_cast<int>(m.size());
  return n;
}

}  // namespace fsdpgen::emit
