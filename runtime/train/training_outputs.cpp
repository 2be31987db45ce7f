// training_outputs: what a run writes besides checkpoints: outputs checked
// before any work, --metrics, the trace, the summary and --save
// (runtime/train/training_outputs.h).
#include "runtime/train/training_outputs.h"

#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/comm.h"
#include "runtime/files/file_io.h"
#include "runtime/files/hf_directory.h"
#include "runtime/files/hf_model_of.h"
#include "runtime/human.h"
#include "runtime/trace.h"
#include "runtime/train/weights.h"

namespace {

// Why the file `path` (given with `flag`) could not be written, or "".
// Creates nothing that stays. A FIFO would wait for a reader, at the end of
// the run or forever, and a device such as /dev/zero would keep nothing.
std::string output_file_problem(const char* flag, const std::string& path) {
  if (const std::string kind = file_special_kind(path); !kind.empty())
    return fmt::format("{} {}: cannot write there: it is {}, not a regular file", flag, path, kind);
  const file_write_problem p = file_write_check(path);
  std::string why;
  switch (p.what) {
    case file_write_problem::none:
      return "";
    case file_write_problem::is_directory:
      why = "it is a directory";
      break;
    case file_write_problem::no_directory:
    case file_write_problem::not_a_directory:
      why = fmt::format("{} is not a directory", p.dir);
      break;
    case file_write_problem::cannot_create:
      why = fmt::format("{}: {}", p.dir, p.error);
      break;
    case file_write_problem::cannot_open:
      why = p.error;
      break;
  }
  return fmt::format("{} {}: cannot write there: {}", flag, path, why);
}

// Why --save cannot write `path`, or "": one safetensors file where it ends
// in .safetensors, else a model directory (runtime/files/hf_directory.h).
std::string save_problem(const std::string& path) {
  if (!hf_output_is_directory(path)) return output_file_problem("--save", path);
  const std::string why = hf_directory_problem(path);
  return why.empty()
             ? ""
             : fmt::format("--save {}: cannot write a model directory there: {}", path, why);
}

// A model directory's files besides its weights: config.json from the
// program's model, and the ids and tokenizer of the token set the run
// trains on (the manifest beside its first file), when it has one.
hf_directory_files save_directory_files(const program& p, const dataloader& data) {
  std::optional<token_set_tokenizer> tokenizer;
  if (data.config.kind == data_kind::tokens && !data.files.empty())
    tokenizer = token_set_tokenizer_of(data.files[0].path);
  return hf_directory_files_of(hf_model_of(p.model), tokenizer, "F32");
}

// Every rank's op times of the traced step, gathered on rank 0 (collective),
// written there as a Chrome trace to `path`; returns rank 0's write error or "".
std::string gather_and_write_trace(const program& p, const std::string& path, int64_t trace_step,
                                   const std::vector<int64_t>& start_ns,
                                   const std::vector<int64_t>& end_ns, const trace_losses& losses,
                                   bool lead) {
  std::vector<int64_t> mine = start_ns;
  mine.insert(mine.end(), end_ns.begin(), end_ns.end());
  std::vector<int64_t> all(lead ? mine.size() * static_cast<size_t>(p.parallel.world) : 0);
  MPI_CHECK(MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                       static_cast<int>(mine.size()), MPI_INT64_T, 0, MPI_COMM_WORLD));
  if (!lead) return "";
  std::vector<std::vector<int64_t>> starts, ends;
  const size_t n = static_cast<size_t>(p.op_count);
  for (int64_t r = 0; r < p.parallel.world; ++r) {
    auto base = all.begin() + static_cast<ptrdiff_t>(r * 2 * n);
    starts.emplace_back(base, base + static_cast<ptrdiff_t>(n));
    ends.emplace_back(base + static_cast<ptrdiff_t>(n), base + static_cast<ptrdiff_t>(2 * n));
  }
  std::ofstream f(path);
  f << trace_json(p, trace_step, starts, ends, losses);
  f.close();
  const double hidden = trace_hidden_comm_fraction(p, starts, ends);
  if (!f) return fmt::format("cannot write {}: {}", path, std::strerror(errno));
  std::printf(
      "trace: step %lld of %lld ranks written to %s (%s)\n", static_cast<long long>(trace_step + 1),
      static_cast<long long>(p.parallel.world), path.c_str(),
      hidden < 0
          ? "no communication"
          : fmt::format("communication hidden behind compute: {:.0f}%", 100 * hidden).c_str());
  return "";
}

}  // namespace

// Checkpoints' directory is created when checkpoints are planned (a stop
// signal's checkpoint needs it too). --metrics and --trace are written
// by rank 0 alone, --trace-data by every rank.
void check_outputs(const run_shape& s, const checkpoint_config& ckpt) {
  std::string error;
  if (!s.run.save.empty()) error = save_problem(s.run.save);
  if (error.empty() && !s.run.save.empty() && hf_output_is_directory(s.run.save))
    if (const std::string why = hf_model_unstated(s.p.model); !why.empty())
      error = fmt::format("--save {}: cannot write a model directory for this model: {}",
                          s.run.save, why);
  if (s.lead && error.empty() && !s.run.metrics.empty())
    error = output_file_problem("--metrics", s.run.metrics);
  if (s.lead && error.empty() && !s.o.trace.empty())
    error = output_file_problem("--trace", s.o.trace);
  if (s.lead && error.empty() && !s.o.eval_scores.empty())
    error = output_file_problem("--eval-scores", s.o.eval_scores);
  if (error.empty() && !s.o.trace_data.empty())
    error = output_file_problem("--trace-data", s.o.trace_data);
  if (error.empty() && s.steps > 0) {
    const std::string why = checkpoint_dir_problem(ckpt.dir, ckpt.every > 0);
    if (!why.empty())
      error = ckpt.dir == s.p.train.checkpoint.dir
                  ? fmt::format("the spec's checkpoint directory {}: {}", ckpt.dir, why)
                  : fmt::format("--checkpoint-dir {}: {}", ckpt.dir, why);
  }
  agree_on_error(error, "checking the outputs");
}

void training_outputs::open_metrics(const run_shape& s, int64_t start_step) {
  std::string error;
  if (s.lead && !s.run.metrics.empty()) {
    const char* mode = "w";
    if (s.o.resume) {
      try {
        const int64_t dropped = run_log_metrics_resume(s.run.metrics, start_step);
        mode = "a";
        if (dropped > 0)
          std::printf(
              "metrics: %s keeps its lines of steps 1-%lld; %lld of later steps, "
              "trained again now, dropped\n",
              s.run.metrics.c_str(), static_cast<long long>(start_step),
              static_cast<long long>(dropped));
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (error.empty()) {
      metrics.reset(std::fopen(s.run.metrics.c_str(), mode));
      if (!metrics) error = fmt::format("cannot write {}: {}", s.run.metrics, std::strerror(errno));
    }
  }
  agree_on_error(error, "opening --metrics");
}

void training_outputs::close_metrics() {
  metrics.reset();
}

void training_outputs::count(const step_record& r, int64_t start_step) {
  totals.steps_run = r.step + 1 - start_step;
  totals.last_step = r.step + 1;
  totals.skipped += r.skipped;
  if (r.step == start_step) totals.first_loss = r.loss;
  totals.last_loss = r.loss;
  totals.total_seconds += r.seconds;
  if (r.step > start_step) totals.timed_seconds += r.seconds, ++totals.timed_steps;
}

void training_outputs::log(const run_shape& s, const step_record& r, int64_t start_step,
                           const loss_scaler& scaler, const val_record& last_val) {
  if (metrics) run_log_metrics_line(metrics.get(), r);
  const bool logged =
      (r.step + 1) % s.log_every == 0 || r.step == start_step || r.step + 1 == s.steps;
  if (s.lead && logged) {
    const double elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    const double eta_s = elapsed_s / static_cast<double>(r.step + 1 - start_step) *
                         static_cast<double>(s.steps - r.step - 1);
    run_log_step(r, s.steps, s.tokens_per_step, eta_s, scaler);
  }
  if (s.lead && r.straggler && straggler_notable(*r.straggler)) run_log_straggler(r);
  if (s.lead && r.validated) run_log_val(last_val, s.steps);
  if (s.lead && r.eval) run_log_eval(*r.eval, s.steps);
  if (!lines.empty()) {
    std::fputs(lines.c_str(), stdout);
    std::fflush(stdout);
    lines.clear();
  }
}

void training_outputs::print_summary(const run_shape& s, const backend& b,
                                     const loss_scaler& scaler) const {
  const std::string memory_lines = memory_report(memory, s.p, b.warmup_steps(), s.lead);
  if (s.lead && totals.steps_run > 0)
    run_log_summary(totals, s.tokens_per_step, memory_lines, scaler);
}

int64_t trace_step(const run_shape& s, int64_t start_step) {
  return s.o.trace_step >= 0 ? s.o.trace_step
                             : start_step + std::min<int64_t>(2, s.steps - start_step - 1);
}

std::string training_outputs::write_trace(const run_shape& s, int64_t start_step,
                                          const val_record& last_val) const {
  const int64_t step = trace_step(s, start_step);
  if (s.o.trace.empty() || step < start_step || step >= start_step + totals.steps_run) return "";
  return gather_and_write_trace(s.p, s.o.trace, step, trace_start_ns, trace_end_ns,
                                {trace_loss, totals.validated ? last_val.step : -1, last_val.loss},
                                s.lead);
}

void save_weights(const run_shape& s, step_context& c, backend& b, const dataloader& data,
                  int64_t steps_done, bool stopped) {
  if (s.run.save.empty()) return;
  if (stopped) {
    if (s.lead)
      std::printf(
          "not writing %s: the run stopped before its last step (the checkpoint has "
          "the weights: fsdpgen merge)\n",
          s.run.save.c_str());
    return;
  }
  const bool directory = hf_output_is_directory(s.run.save);
  hf_directory_files files;
  if (directory) {
    std::string error;
    try {
      files = save_directory_files(s.p, data);
    } catch (const std::exception& e) {
      error = e.what();
    }
    agree_on_error(error, "saving weights");
  }
  b.with_host_weights(
      c, false, [&] { weights_save(c, s.run.save, steps_done, directory ? &files : nullptr); });
  if (!s.lead) return;
  std::printf("saved %s (%s params, F32, Hugging Face %s names)\n", s.run.save.c_str(),
              with_commas(s.p.model.params).c_str(), hf_family_name(s.p));
  if (directory)
    std::printf("saved: a model directory: the weights, %s%s\n",
                hf_directory_describe(files).c_str(),
                files.ids_from.empty()
                    ? "; no tokenizer: the training data is no token set of fsdpgen prepare"
                    : "");
}
