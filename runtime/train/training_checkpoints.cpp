// training_checkpoints: a run's checkpoints: when they are due, written at
// once or behind the next steps, and resuming from one: which checkpoint and
// its record of the run (runtime/train/training_checkpoints.h).
#include "runtime/train/training_checkpoints.h"

#include <mpi.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "runtime/human.h"
#include "runtime/train/run_settings.h"

std::string resume_path(const train_options& o, const std::string& checkpoint_dir, bool lead) {
  std::string path, error;
  if (lead) {
    try {
      if (!o.resume_if_exists)
        path = checkpoint_resolve(o.resume_from.empty() ? checkpoint_dir : o.resume_from);
      else if (const std::vector<std::string> all = checkpoint_list(checkpoint_dir); !all.empty())
        path = all.back();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree_on_error(error, "resuming from a checkpoint");
  int64_t n = static_cast<int64_t>(path.size());
  comm_broadcast(MPI_COMM_WORLD, &n, sizeof n, 0);
  path.resize(static_cast<size_t>(n));
  comm_broadcast(MPI_COMM_WORLD, path.data(), n, 0);
  return path;
}

checkpoint_manifest read_resumed_manifest(const std::string& resume_from) {
  checkpoint_manifest m;
  if (resume_from.empty()) return m;
  std::string error;
  try {
    m = checkpoint_manifest_read(resume_from);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_error(error, "resuming from a checkpoint");
  return m;
}

checkpoint_run resolve_run(const program& p, const train_options& o, const checkpoint_run& launched,
                           const std::string& resume_from, const checkpoint_manifest& m,
                           bool lead) {
  if (resume_from.empty()) return launched;
  if (!m.has_run) {
    if (lead)
      std::printf(
          "note: %s records no run (written before fsdpgen recorded runs): this run's "
          "flags and the spec's values apply\n",
          resume_from.c_str());
    return launched;
  }
  const run_resumed r =
      run_settings_resume(p, o.run, m.run, m.world, m.step, o.allow_batch_change, o.binary);
  agree_on_error(r.batch_problem.empty() ? "" : fmt::format("{}: {}", resume_from, r.batch_problem),
                 "resuming from a checkpoint");
  if (lead) {
    if (!r.taken.empty())
      std::printf("resume: the run as launched, from the checkpoint: %s\n",
                  fmt::format("{}", fmt::join(r.taken, " ")).c_str());
    for (const std::string& w : r.warnings)
      std::printf("warning: %s\n", w.c_str());
  }
  return r.run;
}

bool training_checkpoints::due(int64_t step, int64_t steps, bool stop) const {
  return (config.every > 0 && ((step + 1) % config.every == 0 || step + 1 == steps)) || stop;
}

void training_checkpoints::start_writer(const program& p, bool sync) {
  if (config.every > 0 && !sync && checkpoint_writer::available(p))
    writer = std::make_unique<checkpoint_writer>(p);
}

// Behind the next steps where the plan stages checkpoints (not with
// --checkpoint-sync), except the run's last, written at once: nothing
// follows it to hide the write behind. The step's stall is all the time
// spent here: completing the previous checkpoint (waiting for its write
// first), staging this one or writing it.
double training_checkpoints::save(step_context& c, backend& b, const checkpoint_state& state,
                                  bool last, bool lead, std::string& lines) {
  const auto t = std::chrono::steady_clock::now();
  auto since_t = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  finish_pending(c, lead, lines);
  if (writer && !last) {
    staged_s = writer->start(c, config, state,
                             [&](int buffer, std::byte* to) { b.copy_to_host(c, buffer, to); });
    return staged_stall_s = since_t();
  }
  checkpoint_saved saved;
  b.with_host_weights(c, false, [&] { saved = checkpoint_save(c, config, state); });
  const double stall_s = since_t();
  if (!lead) return stall_s;
  lines += fmt::format("checkpoint: step {} written to {} ({:.2f} MiB in {:.2f} s{})\n", state.step,
                       saved.path, mib(saved.bytes), stall_s,
                       saved.removed ? fmt::format(", {} older removed", saved.removed) : "");
  return stall_s;
}

void training_checkpoints::finish_pending(step_context& c, bool lead, std::string& lines) {
  if (!writer || !writer->pending()) return;
  const int64_t step = writer->pending_step();
  const checkpoint_saved saved = writer->finish(c);
  if (!lead) return;
  lines += fmt::format(
      "checkpoint: step {} written to {} ({:.2f} MiB in {:.2f} s behind the next steps{}; staged "
      "in {:.3f} s, the step stalled {:.3f} s)\n",
      step, saved.path, mib(saved.bytes), saved.write_s,
      saved.removed ? fmt::format(", {} older removed", saved.removed) : "", staged_s,
      staged_stall_s);
}
