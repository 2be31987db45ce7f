// Compare: trace parsing, the schedule check, the report and the merged trace.
#include "codegen/planner/Compare.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "codegen/planner/Intervals.h"

namespace fsdpgen {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const std::set<std::string> kComputeKinds = {"F", "RECOMPUTE", "B", "GRADNORM", "OPT"};
const std::set<std::string> kCommKinds = {"AG", "RS", "AR", "H2D", "D2H"};
const std::vector<std::string> kKindOrder = {"AG", "F",   "RECOMPUTE", "B",        "RS",
                                             "AR", "H2D", "D2H",       "GRADNORM", "OPT"};

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw CompareError(fmt::format("{}: {}", file, what));
}

int64_t int_arg(const json& args, const char* key, const std::string& file, int id) {
  if (!args.contains(key) || !args[key].is_number_integer())
    fail(file, fmt::format("op {}: args.{} is missing or not an integer", id, key));
  return args[key].get<int64_t>();
}

struct Totals {
  double step_ms = 0, exposed_comm_ms = 0;
  std::map<std::string, double> stream_ms, kind_ms;
  std::map<std::string, int> kind_count;
};

// Exposed communication: time in which a collective or copy runs and no
// compute op does (codegen/planner/Cost.h's definition).
Totals totals(const std::vector<TraceOp>& ops) {
  Totals t;
  Intervals compute, comm;
  for (const TraceOp& op : ops) {
    t.step_ms = std::max(t.step_ms, op.end_ms);
    if (op.kind == "FREE") continue;
    t.stream_ms[op.stream] += op.ms();
    t.kind_ms[op.kind] += op.ms();
    ++t.kind_count[op.kind];
    if (kComputeKinds.count(op.kind)) compute.emplace_back(op.start_ms, op.end_ms);
    if (kCommKinds.count(op.kind)) comm.emplace_back(op.start_ms, op.end_ms);
  }
  compute = merged(std::move(compute));
  comm = merged(std::move(comm));
  t.exposed_comm_ms = length(comm) - overlap(comm, compute);
  return t;
}

std::string ratio(double measured, double predicted) {
  return predicted > 0 ? fmt::format("{:.2f}x", measured / predicted) : "-";
}

void check_same_schedule(const StepTrace& p, const StepTrace& m) {
  if (!p.model.empty() && !m.model.empty() && p.model != m.model)
    throw CompareError(fmt::format("the traces are of other models: {} is {}, {} is {}", p.file,
                                   p.model, m.file, m.model));
  const int64_t pw = p.world, mw = m.world > 0 ? m.world : static_cast<int64_t>(m.ranks.size());
  if (pw > 0 && pw != mw)
    throw CompareError(
        fmt::format("the traces are of other worlds: {} plans {} rank{}, {} "
                    "measured {}",
                    p.file, pw, pw == 1 ? "" : "s", m.file, mw));
  const std::vector<TraceOp>& a = p.ranks.at(0);
  for (size_t r = 0; r < m.ranks.size(); ++r) {
    const std::vector<TraceOp>& b = m.ranks[r];
    if (a.size() != b.size())
      throw CompareError(
          fmt::format("{} has {} ops, {} (rank {}) {}: another spec, world or "
                      "micro-batch?",
                      p.file, a.size(), m.file, r, b.size()));
    for (size_t i = 0; i < a.size(); ++i) {
      const TraceOp &x = a[i], &y = b[i];
      if (x.label != y.label || x.kind != y.kind || x.unit != y.unit ||
          x.micro_batch != y.micro_batch || x.group_size != y.group_size ||
          x.payload_bytes != y.payload_bytes)
        throw CompareError(fmt::format(
            "op {} differs: {} has '{}' ({} bytes over {}), {} (rank {}) '{}' ({} bytes over "
            "{}): another spec, world or micro-batch?",
            i, p.file, x.label, x.payload_bytes, x.group_size, m.file, r, y.label, y.payload_bytes,
            y.group_size));
    }
  }
}

// An event's integer field in [0, 2^31), or `otherwise` where it is absent.
int event_int(const json& e, const char* key, int otherwise, const std::string& file,
              size_t index) {
  if (!e.contains(key)) return otherwise;
  const json& v = e[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
    fail(file,
         fmt::format("event {}: \"{}\" is not a whole number from 0 to {}", index, key, INT32_MAX));
  return static_cast<int>(v.get<int64_t>());
}

// An event's string field, or "" where it is absent.
std::string event_text(const json& e, const char* key, const std::string& file, size_t index) {
  if (!e.contains(key)) return "";
  if (!e[key].is_string()) fail(file, fmt::format("event {}: \"{}\" is not a string", index, key));
  return e[key].get<std::string>();
}

// An event's time field in microseconds: a finite number, >= 0 for durations.
double event_us(const json& e, const char* key, const std::string& file, size_t index) {
  if (!e.contains(key) || !e[key].is_number() || !std::isfinite(e[key].get<double>()) ||
      (std::string_view(key) == "dur" && e[key].get<double>() < 0))
    fail(file, fmt::format("event {}: \"{}\" is missing or not a finite{} number", index, key,
                           std::string_view(key) == "dur" ? ", non-negative" : ""));
  return e[key].get<double>();
}

StepTrace parse_step_trace(const json& j, const std::string& file) {
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    fail(file,
         "not a trace (no traceEvents array): write one with `fsdpgen schedule --format "
         "trace` or `./train --trace`");
  StepTrace t;
  t.file = file;
  if (j.contains("otherData") && j["otherData"].is_object()) {
    const json& o = j["otherData"];
    if (o.contains("model") && o["model"].is_string()) t.model = o["model"];
    if (o.contains("world") && o["world"].is_number_integer()) t.world = o["world"];
    if (o.contains("figures") && o["figures"].is_string()) t.figures = o["figures"];
  }
  const json& events = j["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i)
    if (!events[i].is_object()) fail(file, fmt::format("event {} is not a JSON object", i));
  std::map<std::pair<int, int>, std::string> thread_names;
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (event_text(e, "ph", file, i) != "M" || event_text(e, "name", file, i) != "thread_name")
      continue;
    if (!e.contains("args") || !e["args"].is_object())
      fail(file, fmt::format("event {}: a thread_name without args", i));
    thread_names[{event_int(e, "pid", 0, file, i), event_int(e, "tid", 0, file, i)}] =
        event_text(e["args"], "name", file, i);
  }
  std::map<int, std::vector<TraceOp>> by_pid;
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (event_text(e, "ph", file, i) != "X") continue;
    if (!e.contains("args") || !e["args"].is_object())
      fail(file, fmt::format("event {}: an op event without args", i));
    const json& a = e["args"];
    TraceOp op;
    if (!a.contains("op")) fail(file, fmt::format("event {}: an op event without args.op", i));
    op.id = event_int(a, "op", 0, file, i);
    op.label = event_text(e, "name", file, i);
    op.kind = event_text(a, "kind", file, i);
    const int pid = event_int(e, "pid", 0, file, i), tid = event_int(e, "tid", 0, file, i);
    auto name = thread_names.find({pid, tid});
    op.stream = name != thread_names.end() ? name->second : fmt::format("stream {}", tid);
    op.unit = int_arg(a, "unit", file, op.id);
    op.micro_batch = int_arg(a, "micro_batch", file, op.id);
    op.group_size = int_arg(a, "group_size", file, op.id);
    op.payload_bytes = int_arg(a, "payload_bytes", file, op.id);
    op.start_ms = event_us(e, "ts", file, i) / 1e3;
    op.end_ms = op.start_ms + event_us(e, "dur", file, i) / 1e3;
    by_pid[pid].push_back(op);
  }
  if (by_pid.empty()) fail(file, "the trace holds no ops");
  for (auto& [pid, ops] : by_pid) {
    std::sort(ops.begin(), ops.end(),
              [](const TraceOp& a, const TraceOp& b) { return a.id < b.id; });
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].id != static_cast<int>(i))
        fail(file, fmt::format("process {}: op ids are not 0..{} (op {} at position {})", pid,
                               ops.size() - 1, ops[i].id, i));
    t.ranks.push_back(std::move(ops));
  }
  return t;
}

}  // namespace

StepTrace read_step_trace(std::string_view text, const std::string& file) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) fail(file, "not JSON");
  try {
    return parse_step_trace(j, file);
  } catch (const json::exception& e) {  // a type the checks above did not foresee
    fail(file, fmt::format("not a trace of this fsdpgen: {}", e.what()));
  }
}

namespace {

// Two steps of one schedule side by side, `x` against `y` (columns named
// x_name and y_name, the ratio y/x): the step, exposed communication and busy
// time per stream, then per op kind and per op, largest difference first.
// `mean_step_ms` >= 0 adds the mean step over the measured trace's ranks.
std::string tables(const std::vector<TraceOp>& x, const std::vector<TraceOp>& y,
                   const std::string& x_name, const std::string& y_name, double mean_step_ms,
                   int top) {
  const Totals tx = totals(x), ty = totals(y);
  std::string out;
  out += fmt::format("{:<28} {:>13} {:>13} {:>8}\n", "step", x_name, y_name, "ratio");
  auto line = [&](const std::string& what, double a, double b) {
    out += fmt::format("{:<28} {:>13.3f} {:>13.3f} {:>8}\n", what, a, b, ratio(b, a));
  };
  line("step", tx.step_ms, ty.step_ms);
  if (mean_step_ms >= 0) line("step, mean over ranks", tx.step_ms, mean_step_ms);
  line("exposed communication", tx.exposed_comm_ms, ty.exposed_comm_ms);
  for (const auto& [stream, ms] : tx.stream_ms)
    line("busy " + stream, ms, ty.stream_ms.count(stream) ? ty.stream_ms.at(stream) : 0);

  out +=
      fmt::format("\n{:<28} {:>13} {:>13} {:>8}\n", "per op kind (count)", x_name, y_name, "ratio");
  for (const std::string& k : kKindOrder)
    if (tx.kind_count.count(k))
      line(fmt::format("{} ({})", k, tx.kind_count.at(k)), tx.kind_ms.at(k), ty.kind_ms.at(k));

  std::vector<size_t> order;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].kind != "FREE") order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::abs(y[a].ms() - x[a].ms()) > std::abs(y[b].ms() - x[b].ms());
  });
  if (top > 0 && order.size() > static_cast<size_t>(top)) order.resize(top);
  out += fmt::format("\nper op, largest difference first{}\n",
                     top > 0 ? fmt::format(" (top {})", top) : "");
  out += fmt::format("{:>5} {:<16} {:<14} {:>13} {:>13} {:>8}\n", "op", "label", "stream", x_name,
                     y_name, "ratio");
  for (size_t i : order)
    out += fmt::format("{:>5} {:<16} {:<14} {:>13.3f} {:>13.3f} {:>8}\n", x[i].id, x[i].label,
                       x[i].stream, x[i].ms(), y[i].ms(), ratio(y[i].ms(), x[i].ms()));
  return out;
}

}  // namespace

std::string compare_report(const StepTrace& p, const StepTrace& m, const CompareOptions& o) {
  if (p.ranks.size() != 1)
    throw CompareError(
        fmt::format("{}: a predicted trace holds one process, this one {} "
                    "(predicted and measured swapped?)",
                    p.file, p.ranks.size()));
  check_same_schedule(p, m);
  if (o.rank < 0 || o.rank >= static_cast<int>(m.ranks.size()))
    throw CompareError(
        fmt::format("--rank {}: {} holds ranks 0 to {}", o.rank, m.file, m.ranks.size() - 1));
  double mean_step = 0;
  for (const auto& r : m.ranks)
    mean_step += totals(r).step_ms / static_cast<double>(m.ranks.size());
  return fmt::format("predicted {}{}\nmeasured  {} (rank {} of {})\n\n", p.file,
                     p.figures.empty() ? "" : " (" + p.figures + ")", m.file, o.rank,
                     m.ranks.size()) +
         tables(p.ranks[0], m.ranks[static_cast<size_t>(o.rank)], "predicted ms", "measured ms",
                m.ranks.size() > 1 ? mean_step : -1, o.top);
}

std::string compare_ranks_report(const StepTrace& m, int a, int b, int top) {
  const int n = static_cast<int>(m.ranks.size());
  if (n < 2)
    throw CompareError(fmt::format(
        "{} holds one rank{}: --ranks compares two ranks of a measured trace of several (`./train "
        "--trace` under mpirun)",
        m.file, m.figures.empty() ? "" : " (a predicted trace)"));
  for (int r : {a, b})
    if (r < 0 || r >= n)
      throw CompareError(
          fmt::format("--ranks {},{}: {} holds ranks 0 to {}, not {}", a, b, m.file, n - 1, r));
  if (a == b) throw CompareError(fmt::format("--ranks {},{}: name two different ranks", a, b));
  const std::vector<TraceOp>& x = m.ranks[static_cast<size_t>(a)];
  const std::vector<TraceOp>& y = m.ranks[static_cast<size_t>(b)];
  if (x.size() != y.size())
    throw CompareError(fmt::format("{}: rank {} has {} ops, rank {} {}: not one schedule", m.file,
                                   a, x.size(), b, y.size()));
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].label != y[i].label || x[i].kind != y[i].kind)
      throw CompareError(
          fmt::format("{}: op {} is '{}' on rank {}, '{}' on rank {}: not one schedule", m.file, i,
                      x[i].label, a, y[i].label, b));
  return fmt::format("measured {}: rank {} against rank {} (of {})\n\n", m.file, b, a, n) +
         tables(x, y, fmt::format("rank {} ms", a), fmt::format("rank {} ms", b), -1, top);
}

std::string merged_trace(const StepTrace& p, const StepTrace& m, int rank) {
  const std::vector<TraceOp>& pred = p.ranks.at(0);
  const std::vector<TraceOp>& meas = m.ranks.at(static_cast<size_t>(rank));
  std::vector<std::string> streams;  // in first-use order
  for (const auto* ops : {&pred, &meas})
    for (const TraceOp& op : *ops)
      if (std::find(streams.begin(), streams.end(), op.stream) == streams.end())
        streams.push_back(op.stream);
  ordered_json events = ordered_json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"args",
                     {{"name", fmt::format("fsdpgen compare: {} (predicted) and {} "
                                           "(measured, rank {})",
                                           p.file, m.file, rank)}}}});
  for (size_t s = 0; s < streams.size(); ++s)
    for (int measured = 0; measured < 2; ++measured) {
      const int tid = static_cast<int>(2 * s) + measured;
      events.push_back(
          {{"name", "thread_name"},
           {"ph", "M"},
           {"pid", 0},
           {"tid", tid},
           {"args",
            {{"name", measured ? fmt::format("{} (measured, rank {})", streams[s], rank)
                               : fmt::format("{} (predicted)", streams[s])}}}});
      events.push_back({{"name", "thread_sort_index"},
                        {"ph", "M"},
                        {"pid", 0},
                        {"tid", tid},
                        {"args", {{"sort_index", tid}}}});
    }
  for (int measured = 0; measured < 2; ++measured)
    for (const TraceOp& op : measured ? meas : pred) {
      if (op.kind == "FREE") continue;
      const auto s = std::find(streams.begin(), streams.end(), op.stream) - streams.begin();
      events.push_back({{"name", op.label},
                        {"cat", op.kind},
                        {"ph", "X"},
                        {"ts", op.start_ms * 1e3},
                        {"dur", op.ms() * 1e3},
                        {"pid", 0},
                        {"tid", static_cast<int>(2 * s) + measured},
                        {"args",
                         {{"op", op.id},
                          {"predicted_ms", pred[op.id].ms()},
                          {"measured_ms", meas[op.id].ms()}}}});
    }
  ordered_json j;
  j["traceEvents"] = std::move(events);
  j["displayTimeUnit"] = "ms";
  return j.dump() + "\n";
}

}  // namespace fsdpgen
