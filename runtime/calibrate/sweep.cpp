// sweep: the entries in request order, each after a barrier, with failures
// agreed by every rank and rank 0's progress lines.
#include "runtime/calibrate/sweep.h"

#include <fmt/format.h>

#include <climits>
#include <functional>
#include <new>

#include "runtime/calibrate/collectives.h"
#include "runtime/calibrate/contention.h"
#include "runtime/human.h"

namespace {

namespace profile = fsdpgen::profile;

std::string seconds_text(double s) {
  return s < 1e-3 ? fmt::format("{:.2f} us", s * 1e6)
         : s < 1  ? fmt::format("{:.2f} ms", s * 1e3)
                  : fmt::format("{:.3f} s", s);
}

std::string layer_text(const profile::LayerTime& l) {
  std::string dtypes = l.pass == "backward" ? l.dtype + "/" + l.grad_dtype : l.dtype;
  std::string dims;
  for (const char* name : {"B", "T", "C", "H", "F", "V", "Vp", "flash"})
    dims += fmt::format(" {}={}", name, l.dims.at(name));
  return fmt::format("{} {} {} {}{}", l.layer, l.pass, l.family, dtypes, dims);
}

// Rank 0's line per completed entry: "[ 7/31] what ... 17.81 ms (60 runs, mean of 5 rounds)".
class progress {
 public:
  progress(int rank, int64_t total) : rank_(rank), total_(total) {}
  // A contention entry's two parts: "call 1.20 ms (90 runs), pass 3.10 ms (40 runs)".
  void entry(const std::string& what, const std::vector<measurement>& parts, int64_t rounds) {
    ++done_;
    if (rank_ != 0) return;
    const int width = static_cast<int>(std::to_string(total_).size());
    std::string times;
    for (size_t k = 0; k < parts.size(); ++k)
      times += fmt::format("{}{}{} ({} runs)", k == 0 ? "" : ", ",
                           parts.size() == 1 ? ""
                           : k == 0          ? "call "
                                             : "pass ",
                           seconds_text(parts[k].seconds), parts[k].runs);
    fmt::print("[{:>{}}/{}] {} ... {}{}\n", done_, width, total_, what, times,
               rounds > 1 ? fmt::format(", mean of {} rounds", rounds) : "");
    std::fflush(stdout);
  }

 private:
  int rank_;
  int64_t total_;
  int64_t done_ = 0;
};

// After a barrier of the world, the `measuring` ranks run `m`; a failure on
// any rank is thrown on every rank (naming `where`). Returns the slowest
// measuring rank's mean (a step goes at the pace of its slowest rank: its
// collectives wait for it) and the fewest runs any of them made.
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
  return {ranks_max(measuring ? mine.seconds : 0, MPI_COMM_WORLD),
          ranks_min(measuring ? mine.runs : INT64_MAX, MPI_COMM_WORLD)};
}

// One entry of the sweep: its progress text, the compute section it runs in
// (-1: none), how every rank measures it once (a collective call), and
// where its result goes. A contention entry measures two things at once
// (`parts` 2: the collective's time, then the layer pass's); the others one.
struct job {
  std::string what;
  int section = -1;
  std::function<std::vector<measurement>()> measure;
  std::function<void(const std::vector<measurement>&)> store;
};

// A job of one measurement.
job single(std::string what, int section, std::function<measurement()> m,
           std::function<void(const measurement&)> store) {
  return {std::move(what), section, [m = std::move(m)] { return std::vector<measurement>{m()}; },
          [store = std::move(store)](const std::vector<measurement>& r) { store(r.front()); }};
}

// One job per entry of a compute section's `field` (layers, elementwise,
// muon_ns): text(e) and `on` name it, run(e) measures it on the ranks that
// compute (`measuring`), and its seconds and runs are stored in it.
template <class Entry, class Text, class Run>
void add_entry_jobs(std::vector<job>& jobs, std::vector<Entry>& entries, std::string_view field,
                    int section, const std::string& where, const std::string& on, bool measuring,
                    Text text, Run run) {
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    jobs.push_back(single(
        text(e) + on, section,
        [&e, run, measuring, at = fmt::format("{}.{}[{}]", where, field, i)] {
          return across_ranks(measuring, at, [&] { return run(e); });
        },
        [&e](const measurement& m) { e.seconds = m.seconds, e.runs = m.runs; }));
  }
}

// Local ranks [0, ranks_per_node) of every node compute at once, each with
// the threads the runtime's launch would give it.
void add_compute_jobs(std::vector<job>& jobs, profile::Compute& c, int section,
                      const std::string& where, const rank_layout& l, calibrate_target& t,
                      const measure_options& o) {
  const bool measuring = l.local_rank < c.ranks_per_node;
  const std::string on = fmt::format(", {}/node", plural(c.ranks_per_node, "rank"));
  jobs.push_back(single(
      "op overhead (a stream worker's wake-up)" + on, section,
      [&, where, measuring] {
        return across_ranks(measuring, where, [&] { return t.op_overhead(o); });
      },
      [&c](const measurement& m) { c.op_overhead_s = m.seconds; }));
  add_entry_jobs(jobs, c.layers, "layers", section, where, on, measuring, layer_text,
                 [&](const profile::LayerTime& e) { return t.layer(e, o); });
  add_entry_jobs(
      jobs, c.elementwise, "elementwise", section, where, on, measuring,
      [](const profile::ElementwiseTime& e) {
        return fmt::format("{} {} {} elems", e.op, e.dtype, e.elems);
      },
      [&](const profile::ElementwiseTime& e) { return t.elementwise(e, o); });
  add_entry_jobs(
      jobs, c.muon_ns, "muon_ns", section, where, on, measuring,
      [](const profile::MuonNsTime& e) {
        return fmt::format("muon_ns ({}, {}) {} steps {}", e.rows, e.cols, e.ns_steps, e.ns_dtype);
      },
      [&](const profile::MuonNsTime& e) { return t.muon_ns(e, o); });
}

// On the group its entry names: its ranks spread over its nodes as a plan places them.
measurement measure_collective(profile::CollectiveTime& c, const rank_layout& l,
                               const std::string& where, calibrate_target& t,
                               const measure_options& o) {
  MPI_Comm group = ranks_group(l.spanning(static_cast<int>(c.ranks), static_cast<int>(c.nodes)));
  const measurement m =
      across_ranks(group != MPI_COMM_NULL, where, [&] { return t.collective(c, group, o); });
  if (group != MPI_COMM_NULL) MPI_Comm_free(&group);
  return m;
}

std::string collective_text(const profile::CollectiveTime& c) {
  return fmt::format("{} {} {} bytes over {} on {}", c.op, c.dtype, c.bytes,
                     plural(c.ranks, "rank"), plural(c.nodes, "node"));
}

// The compute section whose ranks per node are a contention entry's ranks
// (sweep_check made sure there is one).
int contention_section(const profile::Profile& p, const profile::ContentionTime& e) {
  for (size_t i = 0; i < p.compute.size(); ++i)
    if (p.compute[i].ranks_per_node == e.collective.ranks) return static_cast<int>(i);
  return -1;
}

job contention_job(profile::Profile& p, size_t i, const rank_layout& l, calibrate_target& t,
                   const std::string& where, const measure_options& o) {
  profile::ContentionTime& e = p.contention[i];
  return {fmt::format("{} beside {}", collective_text(e.collective), layer_text(e.layer)),
          contention_section(p, e),
          [&e, &l, &t, &o, where] {
            MPI_Comm group = ranks_group(l.spanning(static_cast<int>(e.collective.ranks), 1));
            contention_measurement m;
            const measurement first = across_ranks(group != MPI_COMM_NULL, where, [&] {
              m = measure_contention(e, group, t, o);
              return m.collective;
            });
            const measurement second =
                across_ranks(group != MPI_COMM_NULL, where, [&] { return m.layer; });
            if (group != MPI_COMM_NULL) MPI_Comm_free(&group);
            return std::vector<measurement>{first, second};
          },
          [&e](const std::vector<measurement>& r) {
            e.collective.seconds = r[0].seconds, e.collective.runs = r[0].runs;
            e.layer.seconds = r[1].seconds, e.layer.runs = r[1].runs;
          }};
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
  for (size_t i = 0; i < request.contention.size(); ++i) {
    const profile::ContentionTime& e = request.contention[i];
    const std::string at = fmt::format("{}: contention[{}]", file, i);
    if (e.collective.nodes != 1)
      throw calibrate_error(
          fmt::format("{}.collective.nodes: must be 1, not {}", at, e.collective.nodes));
    if (contention_section(request, e) < 0)
      throw calibrate_error(fmt::format(
          "{}: no compute section with ranks_per_node {} (its collective's ranks) to run its "
          "layer pass in",
          at, e.collective.ranks));
    if (const std::string p = collective_problem(e.collective, l); !p.empty())
      throw calibrate_error(fmt::format("{}.collective: {}", at, p));
    if (const std::string p = t.layer_problem(e.layer); !p.empty())
      throw calibrate_error(fmt::format("{}.layer: {}", at, p));
  }
}

void sweep_run(profile::Profile& p, const rank_layout& l, calibrate_target& t,
               const std::string& file, const measure_options& o) {
  std::vector<job> jobs;
  for (size_t i = 0; i < p.compute.size(); ++i)
    add_compute_jobs(jobs, p.compute[i], static_cast<int>(i),
                     fmt::format("{}: compute[{}]", file, i), l, t, o);
  for (size_t i = 0; i < p.collectives.size(); ++i) {
    profile::CollectiveTime& c = p.collectives[i];
    jobs.push_back(single(
        collective_text(c), -1,
        [&, where = fmt::format("{}: collectives[{}]", file, i)] {
          return measure_collective(c, l, where, t, o);
        },
        [&c](const measurement& m) { c.seconds = m.seconds, c.runs = m.runs; }));
  }
  for (size_t i = 0; i < p.copies.size(); ++i) {
    profile::CopyTime& c = p.copies[i];
    jobs.push_back(single(
        fmt::format("{} {} bytes (memcpy)", c.op, c.bytes), -1,
        [&, where = fmt::format("{}: copies[{}]", file, i)] {
          return across_ranks(l.rank == 0, where, [&] { return t.copy(c, o); });
        },
        [&c](const measurement& m) { c.seconds = m.seconds, c.runs = m.runs; }));
  }
  for (size_t i = 0; i < p.contention.size(); ++i)
    jobs.push_back(contention_job(p, i, l, t, fmt::format("{}: contention[{}]", file, i), o));
  // Round by round over every entry, so that a machine whose speed drifts
  // (a shared VM's neighbours) slows every entry alike; each entry's time is
  // the mean of its rounds' means.
  progress out(l.rank, static_cast<int64_t>(jobs.size()));
  std::vector<std::vector<std::vector<double>>> round_seconds(jobs.size());  // job, part, round
  std::vector<std::vector<int64_t>> runs(jobs.size());                       // job, part
  for (int64_t round = 0; round < o.rounds; ++round) {
    int section = -1;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const job& j = jobs[i];
      if (j.section >= 0 && j.section != section) {
        section = j.section;
        profile::Compute& c = p.compute[static_cast<size_t>(section)];
        c.threads_per_rank = t.enter_compute(c.ranks_per_node, l.local_rank < c.ranks_per_node);
      }
      const std::vector<measurement> parts = j.measure();
      round_seconds[i].resize(parts.size());
      runs[i].resize(parts.size(), 0);
      for (size_t k = 0; k < parts.size(); ++k) {
        round_seconds[i][k].push_back(parts[k].seconds);
        runs[i][k] += parts[k].runs;
      }
    }
    if (l.rank == 0 && o.rounds > 1) {
      fmt::print("round {}/{} measured\n", round + 1, o.rounds);
      std::fflush(stdout);
    }
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::vector<measurement> parts;
    for (size_t k = 0; k < round_seconds[i].size(); ++k)
      parts.push_back({mean_of(round_seconds[i][k]), runs[i][k]});
    jobs[i].store(parts);
    out.entry(jobs[i].what, parts, o.rounds);
  }
}
