// trace: Chrome trace events from measured op times.
#include "runtime/trace.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace {

constexpr const char* kStreamNames[kStreamCount] = {"compute",   "allgather", "reducescatter",
                                                    "allreduce", "copy",      "host"};
constexpr const char* kGroupNames[] = {"none", "shard", "replica", "world"};

// The op as the planner's JSON (codegen/planner/Schedule.h's op_json), from its row.
nlohmann::ordered_json op_args(const program_op& op) {
  nlohmann::ordered_json deps = nlohmann::ordered_json::array();
  for (int d = 0; d < op.dep_count; ++d)
    deps.push_back(op.deps[d]);
  return {{"op", op.id},
          {"kind", op_kind_label(op.kind)},
          {"unit", op.unit},
          {"segment", op.segment},
          {"micro_batch", op.micro_batch},
          {"group", kGroupNames[static_cast<int>(op.group)]},
          {"group_size", op.group_size},
          {"payload_bytes", op.payload_bytes},
          {"sent_bytes", op.sent_bytes},
          {"memory_bytes", op.memory_bytes},
          {"flops", op.flops},
          {"deps", std::move(deps)}};
}

}  // namespace

std::string trace_json(const program& p, int64_t step,
                       const std::vector<std::vector<int64_t>>& start_ns,
                       const std::vector<std::vector<int64_t>>& end_ns,
                       const trace_losses& losses) {
  using nlohmann::ordered_json;
  ordered_json events = ordered_json::array();
  bool used[kStreamCount] = {};
  for (int i = 0; i < p.op_count; ++i)
    used[static_cast<int>(p.ops[i].stream)] = true;
  for (size_t rank = 0; rank < start_ns.size(); ++rank) {
    const int pid = static_cast<int>(rank);
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"args",
                       {{"name", fmt::format("fsdpgen {} on cpu (measured, rank {}, step {})",
                                             p.model_name, rank, step + 1)}}}});
    for (int s = 0; s < kStreamCount; ++s) {
      if (!used[s]) continue;
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", s},
                        {"args", {{"name", kStreamNames[s]}}}});
      events.push_back({{"name", "thread_sort_index"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", s},
                        {"args", {{"sort_index", s}}}});
    }
    for (int i = 0; i < p.op_count; ++i) {
      const program_op& op = p.ops[i];
      events.push_back({{"name", op.label},
                        {"cat", op_kind_label(op.kind)},
                        {"ph", "X"},
                        {"ts", static_cast<double>(start_ns[rank][i]) / 1e3},
                        {"dur", static_cast<double>(end_ns[rank][i] - start_ns[rank][i]) / 1e3},
                        {"pid", pid},
                        {"tid", static_cast<int>(op.stream)},
                        {"args", op_args(op)}});
    }
  }
  // The losses as counters at the end of rank 0's step.
  int64_t end = 0;
  for (int i = 0; i < p.op_count && !end_ns.empty(); ++i)
    end = std::max(end, end_ns[0][i]);
  ordered_json counters = {{"loss", losses.loss}};
  if (losses.val_step >= 0) counters["val loss"] = losses.val_loss;
  events.push_back({{"name", "losses"},
                    {"ph", "C"},
                    {"ts", static_cast<double>(end) / 1e3},
                    {"pid", 0},
                    {"args", counters}});
  ordered_json j;
  j["traceEvents"] = std::move(events);
  j["displayTimeUnit"] = "ms";
  // What `fsdpgen compare` checks against the predicted trace's.
  j["otherData"] = {{"model", p.model_name}, {"world", p.parallel.world}, {"step", step + 1}};
  j["otherData"]["loss"] = losses.loss;
  if (losses.val_step >= 0) {
    j["otherData"]["val_loss"] = losses.val_loss;
    j["otherData"]["val_step"] = losses.val_step;
  }
  return j.dump(1) + "\n";
}

double trace_hidden_comm_fraction(const program& p,
                                  const std::vector<std::vector<int64_t>>& start_ns,
                                  const std::vector<std::vector<int64_t>>& end_ns) {
  double comm = 0, hidden = 0;
  for (size_t rank = 0; rank < start_ns.size(); ++rank) {
    std::vector<std::pair<int64_t, int64_t>> compute;
    for (int i = 0; i < p.op_count; ++i)
      if (p.ops[i].stream == stream_id::compute && p.ops[i].kind != op_kind::free)
        compute.emplace_back(start_ns[rank][i], end_ns[rank][i]);
    for (int i = 0; i < p.op_count; ++i) {
      if (!op_kind_is_collective(p.ops[i].kind)) continue;
      int64_t a = start_ns[rank][i], b = end_ns[rank][i];
      comm += static_cast<double>(b - a);
      for (auto [s, e] : compute)  // compute intervals are disjoint (one stream)
        hidden += static_cast<double>(std::max<int64_t>(0, std::min(b, e) - std::max(a, s)));
    }
  }
  return comm > 0 ? hidden / comm : -1.0;
}
