// sweep: the entries in request order, each after a barrier, with failures
// agreed by every rank and rank 0's progress lines.
#include "calibrate/sweep.h"

#include <fmt/format.h>

#include <climits>
#include <functional>
#include <new>

#include "calibrate/collectives.h"

namespace {

namespace profile = fsdpgen::profile;

int64_t entry_count(const profile::Profile& p) {
  int64_t n = static_cast<int64_t>(p.collectives.size() + p.copies.size());
  for (const profile::Compute& c : p.compute)
    n += 1 + static_cast<int64_t>(c.layers.size() + c.elementwise.size());  // 1: op overhead
  return n;
}

std::string seconds_text(double s) {
  return s < 1e-3 ? fmt::format("{:.2f} us", s * 1e6)
         : s < 1  ? fmt::format("{:.2f} ms", s * 1e3)
                  : fmt::format("{:.3f} s", s);
}

std::string plural(int64_t n, const char* what) {
  return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
}

std::string layer_text(const profile::LayerTime& l) {
  std::string dtypes = l.pass == "backward" ? l.dtype + "/" + l.grad_dtype : l.dtype;
  std::string dims;
  for (const char* name : {"B", "T", "C", "H", "F", "V", "Vp", "flash"})
    dims += fmt::format(" {}={}", name, l.dims.at(name));
  return fmt::format("{} {} {} {}{}", l.layer, l.pass, l.family, dtypes, dims);
}

// Rank 0's line per completed entry: "[ 7/31] what ... 17.81 ms (median of 12)".
class progress {
 public:
  progress(int rank, int64_t total) : rank_(rank), total_(total) {}
  void entry(const std::string& what, const measurement& m) {
    ++done_;
    if (rank_ != 0) return;
    const int width = static_cast<int>(std::to_string(total_).size());
    fmt::print("[{:>{}}/{}] {} ... {} (median of {})\n", done_, width, total_, what,
               seconds_text(m.seconds), m.runs);
    std::fflush(stdout);
  }

 private:
  int rank_;
  int64_t total_;
  int64_t done_ = 0;
};

// After a barrier of the world, the `measuring` ranks run `m`; a failure on
// any rank is thrown on every rank (naming `where`). Returns the mean of the
// measuring ranks' medians and the fewest runs any of them made.
measurement across_ranks(bool measuring, const std::string& where,
                         const std::function<measurement()>& m) {
  ranks_barrier(MPI_COMM_WORLD);
  measurement mine;
  std::string error;
  if (measuring) {
    try {
      mine = m();
    } catch (const peer_failed&) {
      // the rank that failed reports it
    } catch (const std::bad_alloc&) {
      error = fmt::format("{}: out of memory (this entry's buffers do not fit)", where);
    } catch (const std::exception& e) {
      error = fmt::format("{}: {}", where, e.what());
    }
  }
  if (const std::string first = ranks_first_error(error); !first.empty())
    throw calibrate_error(first);
  const double measurers = ranks_sum(measuring ? 1 : 0, MPI_COMM_WORLD);
  return {ranks_sum(measuring ? mine.seconds : 0, MPI_COMM_WORLD) / measurers,
          ranks_min(measuring ? mine.runs : INT64_MAX, MPI_COMM_WORLD)};
}

// Local ranks [0, ranks_per_node) of every node compute at once, each with
// the threads the runtime's launch would give it.
void run_compute(profile::Compute& c, const std::string& where, const rank_layout& l,
                 calibrate_target& t, const measure_options& o, progress& out) {
  const bool measuring = l.local_rank < c.ranks_per_node;
  c.threads_per_rank = t.enter_compute(c.ranks_per_node, measuring);
  const std::string on = fmt::format(", {}/node x {}", plural(c.ranks_per_node, "rank"),
                                     plural(c.threads_per_rank, "thread"));
  const measurement overhead = across_ranks(measuring, where, [&] { return t.op_overhead(o); });
  c.op_overhead_s = overhead.seconds;
  out.entry("op overhead (a stream worker's wake-up)" + on, overhead);
  for (size_t i = 0; i < c.layers.size(); ++i) {
    profile::LayerTime& e = c.layers[i];
    const measurement m = across_ranks(measuring, fmt::format("{}.layers[{}]", where, i),
                                       [&] { return t.layer(e, o); });
    e.seconds = m.seconds;
    e.runs = m.runs;
    out.entry(layer_text(e) + on, m);
  }
  for (size_t i = 0; i < c.elementwise.size(); ++i) {
    profile::ElementwiseTime& e = c.elementwise[i];
    const measurement m = across_ranks(measuring, fmt::format("{}.elementwise[{}]", where, i),
                                       [&] { return t.elementwise(e, o); });
    e.seconds = m.seconds;
    e.runs = m.runs;
    out.entry(fmt::format("{} {} {} elems{}", e.op, e.dtype, e.elems, on), m);
  }
}

void run_collective(profile::CollectiveTime& c, const std::string& where, calibrate_target& t,
                    const measure_options& o, progress& out) {
  MPI_Comm group = ranks_first(static_cast<int>(c.ranks));
  const measurement m =
      across_ranks(group != MPI_COMM_NULL, where, [&] { return t.collective(c, group, o); });
  if (group != MPI_COMM_NULL) MPI_Comm_free(&group);
  c.seconds = m.seconds;
  c.runs = m.runs;
  out.entry(fmt::format("{} {} {} bytes over {} on {}", c.op, c.dtype, c.bytes,
                        plural(c.ranks, "rank"), plural(c.nodes, "node")),
            m);
}

}  // namespace

void sweep_check(const profile::Profile& request, const rank_layout& l, const calibrate_target& t,
                 const std::string& file) {
  const int per_node = l.fewest_ranks_on_a_node();
  for (size_t i = 0; i < request.compute.size(); ++i) {
    const profile::Compute& c = request.compute[i];
    if (c.ranks_per_node > per_node)
      throw calibrate_error(fmt::format(
          "{}: compute[{}].ranks_per_node: {} ranks per node, but the calibration runs {} on {} "
          "(start it with at least {} ranks on every node)",
          file, i, c.ranks_per_node, per_node, l.nodes() == 1 ? "this node" : "its smallest node",
          c.ranks_per_node));
    for (size_t j = 0; j < c.layers.size(); ++j)
      if (const std::string p = t.layer_problem(c.layers[j]); !p.empty())
        throw calibrate_error(fmt::format("{}: compute[{}].layers[{}]: {}", file, i, j, p));
  }
  for (size_t i = 0; i < request.collectives.size(); ++i)
    if (const std::string p = collective_problem(request.collectives[i], l); !p.empty())
      throw calibrate_error(fmt::format("{}: collectives[{}]: {}", file, i, p));
}

void sweep_run(profile::Profile& p, const rank_layout& l, calibrate_target& t,
               const std::string& file, const measure_options& o) {
  progress out(l.rank, entry_count(p));
  for (size_t i = 0; i < p.compute.size(); ++i)
    run_compute(p.compute[i], fmt::format("{}: compute[{}]", file, i), l, t, o, out);
  for (size_t i = 0; i < p.collectives.size(); ++i)
    run_collective(p.collectives[i], fmt::format("{}: collectives[{}]", file, i), t, o, out);
  for (size_t i = 0; i < p.copies.size(); ++i) {
    profile::CopyTime& c = p.copies[i];
    const measurement m = across_ranks(l.rank == 0, fmt::format("{}: copies[{}]", file, i),
                                       [&] { return t.copy(c, o); });
    c.seconds = m.seconds;
    c.runs = m.runs;
    out.entry(fmt::format("{} {} bytes (memcpy)", c.op, c.bytes), m);
  }
}
