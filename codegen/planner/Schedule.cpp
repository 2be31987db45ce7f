// Schedule: the planner's step schedule (codegen/planner/Schedule.h): an op's bytes and
// operands, the gradient dtypes. build_schedule is the builder's
// (codegen/planner/ScheduleBuilder.cpp); text and JSON forms are in ScheduleText.cpp.
#include "codegen/planner/Schedule.h"

#include <string>

#include <fmt/format.h>

namespace fsdpgen {

int64_t Op::sent_bytes() const {
  if (group_size <= 1) return 0;
  int64_t ring = payload_bytes / group_size * (group_size - 1);
  if (kind == OpKind::AllReduce) return 2 * ring;
  if (kind == OpKind::AllGather || kind == OpKind::ReduceScatter) return ring;
  if (kind == OpKind::MuonGather || kind == OpKind::MuonScatter) return payload_bytes;
  return 0;
}

int Op::operand(Role role) const {
  for (const OpOperand& o : operands)
    if (o.role == role) return o.buffer;
  return -1;
}

std::string Op::label() const {
  std::string s(to_string(kind));
  if (unit >= 0) s += fmt::format(" u{}", unit);
  if (segment >= 0) s += fmt::format(" s{}", segment);
  if (micro_batch >= 0) s += fmt::format(" mb{}", micro_batch);
  if (is_loss_reduce()) s += " loss";
  return s;
}

int64_t Schedule::sent_bytes(OpKind kind) const {
  int64_t n = 0;
  for (const Op& op : ops)
    if (op.kind == kind) n += op.sent_bytes();
  return n;
}

DType unsharded_grad_dtype(const ParallelSpec& p) {
  return p.shard_group > 1 || p.replicas() > 1 ? p.precision.reduce : DType::FP32;
}

DType grad_shard_dtype(const ParallelSpec& p) {
  return p.accumulate.micro_batches > 1 || p.offload == Offload::Cpu ? DType::FP32
                                                                     : unsharded_grad_dtype(p);
}

bool runs_on_host(const Schedule& s, const Op& op) {
  if (s.units.spec.parallel.offload != Offload::Cpu) return false;
  if (op.stream == StreamId::Host) return true;
  if (op.group == CommGroup::None) return false;
  for (int b : op.uses)
    if (s.buffers[static_cast<size_t>(b)].space == MemSpace::Device) return false;
  return true;  // no buffer at all: the norm's partial sums, which the host stream holds
}

}  // namespace fsdpgen
