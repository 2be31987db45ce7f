// ScheduleText: a schedule as text (print_schedule) and as JSON (schedule_json,
// op_json), for `fsdpgen schedule` and the tools that read it.
#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "codegen/planner/Schedule.h"
#include "codegen/planner/Validation.h"

namespace fsdpgen {

namespace {

// What each op kind's label means (kOpKindNames' order), for the legend.
constexpr std::array<std::string_view, kOpKindNames.size()> kOpKindMeanings = {
    "all-gather of a unit's parameter shards",
    "forward",
    "forward again before the backward (recompute)",
    "backward",
    "reduce-scatter of a unit's gradients",
    "all-reduce",
    "buffers return to the plan",
    "copy host to device",
    "copy device to host",
    "this rank's part of the gradient norm",
    "optimizer step",
    "Muon's gradients to the matrices' owners",
    "Muon's Newton-Schulz iterations",
    "Muon's updates back to the shards",
};

// The legend of the op labels ("F u1 s1 mb0"): the fields, then each op kind
// the schedule holds, in lines of at most 90 columns.
std::string legend(const Schedule& s) {
  std::vector<std::string> items;
  for (size_t k = 0; k < kOpKindNames.size(); ++k)
    if (std::any_of(s.ops.begin(), s.ops.end(),
                    [&](const Op& op) { return static_cast<size_t>(op.kind) == k; }))
      items.push_back(fmt::format("{} {}", kOpKindNames[k], kOpKindMeanings[k]));
  if (std::any_of(s.ops.begin(), s.ops.end(), [](const Op& op) { return op.is_loss_reduce(); }))
    items.push_back("AR loss the step's loss over the world");
  std::string out =
      "legend: #N op N (deps: the ops it waits for); uN unit N (u0 the root), sN segment N\n"
      "  (a run of a unit's layers), mbN micro-batch N;";
  size_t column = out.size() - out.rfind('\n') - 1;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string item = items[i] + (i + 1 < items.size() ? "," : "\n");
    if (column + 1 + item.size() > 90) {
      out += "\n ";
      column = 1;
    }
    out += " " + item;
    column += 1 + item.size();
  }
  return out;
}

std::string deps_text(const Op& op) {
  if (op.deps.empty()) return "-";
  std::vector<std::string> d;
  for (int x : op.deps)
    d.push_back(fmt::format("#{}", x));
  return fmt::format("{}", fmt::join(d, " "));
}

}  // namespace

std::string print_schedule(const Schedule& s) {
  const Spec& spec = s.units.spec;
  const ParallelSpec& p = spec.parallel;
  std::string out = fmt::format(
      "schedule of {}: {}, world {} (shard group {}, {} replica{}), {} micro-batch{} of {} x {} "
      "tokens per rank\n",
      spec.model.name, to_string(p.sharding), p.world, p.shard_group, p.replicas(),
      p.replicas() == 1 ? "" : "s", p.accumulate.micro_batches,
      p.accumulate.micro_batches == 1 ? "" : "es", s.micro_batch, spec.model.context);
  out += fmt::format(
      "prefetch forward={} backward={} max_inflight={}, recompute={}, offload={}, accumulate "
      "reduce={}\n",
      p.prefetch.forward, to_string(p.prefetch.backward), p.prefetch.max_inflight,
      to_string(p.recompute),
      fmt::format("{}{}", to_string(p.offload), p.offload_activations ? "+activations" : ""),
      to_string(p.accumulate.reduce));
  out += fmt::format(
      "{} ops, {} buffers; bytes sent per rank: all-gather {}, reduce-scatter {}, all-reduce {}\n",
      s.ops.size(), s.buffers.size(), s.sent_bytes(OpKind::AllGather),
      s.sent_bytes(OpKind::ReduceScatter), s.sent_bytes(OpKind::AllReduce));
  out += describe_validation_pass(s) + "\n";
  out += legend(s);
  for (size_t st = 0; st < kStreamNames.size(); ++st) {
    std::vector<const Op*> ops;
    for (const Op& op : s.ops)
      if (static_cast<size_t>(op.stream) == st) ops.push_back(&op);
    if (ops.empty()) continue;
    out += fmt::format("stream {} ({} ops):\n", kStreamNames[st], ops.size());
    for (const Op* op : ops) {
      std::string what;
      if (op->group != CommGroup::None)
        what = fmt::format("{} B over {} x{}", op->payload_bytes, to_string(op->group),
                           op->group_size);
      else if (op->kind == OpKind::CopyH2D || op->kind == OpKind::CopyD2H)
        what = fmt::format("{} B", op->payload_bytes);
      else if (op->kind == OpKind::Free) {
        std::vector<std::string> names;
        for (int b : op->frees)
          names.push_back(s.buffers[b].name);
        what = fmt::format("{}", fmt::join(names, " "));
      } else if (op->flops > 0)
        what = fmt::format("{:.4g} flop", op->flops);
      else if (op->memory_bytes > 0)
        what = fmt::format("{} B memory", op->memory_bytes);
      out += fmt::format("  #{:<5} {:<20} {:<44} deps {}\n", op->id, op->label(), what,
                         deps_text(*op));
    }
  }
  return out;
}

nlohmann::ordered_json op_json(const Op& op) {
  return {{"op", op.id},
          {"kind", std::string(to_string(op.kind))},
          {"unit", op.unit},
          {"segment", op.segment},
          {"micro_batch", op.micro_batch},
          {"group", std::string(to_string(op.group))},
          {"group_size", op.group_size},
          {"payload_bytes", op.payload_bytes},
          {"sent_bytes", op.sent_bytes()},
          {"memory_bytes", op.memory_bytes},
          {"flops", op.flops},
          {"deps", op.deps}};
}

std::string schedule_json(const Schedule& s) {
  using nlohmann::ordered_json;
  const Spec& spec = s.units.spec;
  ordered_json j;
  j["model"] = spec.model.name;
  j["sharding"] = std::string(to_string(spec.parallel.sharding));
  j["world"] = spec.parallel.world;
  j["shard_group"] = spec.parallel.shard_group;
  j["replicas"] = spec.parallel.replicas();
  j["micro_batches"] = spec.parallel.accumulate.micro_batches;
  j["micro_batch"] = s.micro_batch;
  j["context"] = spec.model.context;
  j["streams"] = ordered_json::array();
  for (std::string_view n : kStreamNames)
    j["streams"].push_back(std::string(n));
  j["units"] = ordered_json::array();
  for (const FlatUnit& u : s.units.units)
    j["units"].push_back({{"index", u.index},
                          {"name", u.name},
                          {"param_elems", u.param_elems},
                          {"padded_elems", u.padded_elems},
                          {"shard_elems", u.shard_elems}});
  j["buffers"] = ordered_json::array();
  for (const Buffer& b : s.buffers)
    j["buffers"].push_back({{"id", b.id},
                            {"name", b.name},
                            {"kind", std::string(to_string(b.kind))},
                            {"space", b.space == MemSpace::Device ? "device" : "host"},
                            {"bytes", b.bytes},
                            {"unit", b.unit},
                            {"micro_batch", b.micro_batch},
                            {"persistent", b.persistent}});
  j["ops"] = ordered_json::array();
  for (const Op& op : s.ops) {
    ordered_json o = op_json(op);
    o["stream"] = std::string(to_string(op.stream));
    o["uses"] = op.uses;
    o["frees"] = op.frees;
    j["ops"].push_back(o);
  }
  return j.dump(1) + "\n";
}

}  // namespace fsdpgen
