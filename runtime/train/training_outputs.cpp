// training_outputs: what a run writes besides checkpoints: outputs checked
// before any work, --metrics, the trace, the summary and --save
// (runtime/train/training_run.h).
#include "runtime/train/training_run.h"

#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
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
#include "runtime/weights.h"

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

// Collective: throws agreed_error on every rank when an output cannot be
// written (checkpoints' directory created when checkpoints are planned; a
// stop signal's checkpoint needs it too). --metrics and --trace are written
// by rank 0 alone, --trace-data by every rank.
void training_run::check_outputs() const {
  std::string error;
  if (!run_.save.empty()) error = save_problem(run_.save);
  if (lead_ && error.empty() && !run_.metrics.empty())
    error = output_file_problem("--metrics", run_.metrics);
  if (lead_ && error.empty() && !o_.trace.empty()) error = output_file_problem("--trace", o_.trace);
  if (lead_ && error.empty() && !o_.eval_scores.empty())
    error = output_file_problem("--eval-scores", o_.eval_scores);
  if (error.empty() && !o_.trace_data.empty())
    error = output_file_problem("--trace-data", o_.trace_data);
  if (error.empty() && steps_ > 0) {
    const std::string why = checkpoint_dir_problem(ckpt_.dir, ckpt_.every > 0);
    if (!why.empty())
      error = ckpt_.dir == p_.train.checkpoint.dir
                  ? fmt::format("the spec's checkpoint directory {}: {}", ckpt_.dir, why)
                  : fmt::format("--checkpoint-dir {}: {}", ckpt_.dir, why);
  }
  agree_on_error(error, "checking the outputs");
}

void training_run::open_metrics() {
  std::string error;
  if (lead_ && !run_.metrics.empty()) {
    const char* mode = "w";
    if (o_.resume) {
      try {
        const int64_t dropped = run_log_metrics_resume(run_.metrics, start_step_);
        mode = "a";
        if (dropped > 0)
          std::printf(
              "metrics: %s keeps its lines of steps 1-%lld; %lld of later steps, "
              "trained again now, dropped\n",
              run_.metrics.c_str(), static_cast<long long>(start_step_),
              static_cast<long long>(dropped));
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (error.empty()) {
      metrics_.reset(std::fopen(run_.metrics.c_str(), mode));
      if (!metrics_) error = fmt::format("cannot write {}: {}", run_.metrics, std::strerror(errno));
    }
  }
  agree_on_error(error, "opening --metrics");
}

void training_run::close_metrics() {
  metrics_.reset();
}

void training_run::print_summary() const {
  const std::string memory_lines = memory_report(memory_, p_, b_->warmup_steps(), lead_);
  if (lead_ && totals_.steps_run > 0)
    run_log_summary(totals_, tokens_per_step_, memory_lines, scaler_);
}

int64_t training_run::trace_step() const {
  return o_.trace_step >= 0 ? o_.trace_step
                            : start_step_ + std::min<int64_t>(2, steps_ - start_step_ - 1);
}

std::string training_run::write_trace() const {
  const int64_t step = trace_step();
  if (o_.trace.empty() || step < start_step_ || step >= start_step_ + totals_.steps_run) return "";
  return gather_and_write_trace(
      p_, o_.trace, step, trace_start_ns_, trace_end_ns_,
      {trace_loss_, totals_.validated ? last_val_.step : -1, last_val_.loss}, lead_);
}

void training_run::save_weights() {
  if (run_.save.empty()) return;
  if (stop_) {
    if (lead_)
      std::printf(
          "not writing %s: the run stopped before its last step (the checkpoint has "
          "the weights: fsdpgen merge)\n",
          run_.save.c_str());
    return;
  }
  const bool directory = hf_output_is_directory(run_.save);
  hf_directory_files files;
  if (directory) {
    std::string error;
    try {
      files = save_directory_files(p_, data_);
    } catch (const std::exception& e) {
      error = e.what();
    }
    agree_on_error(error, "saving weights");
  }
  b_->with_host_weights(c_, false, [&] {
    weights_save(c_, run_.save, start_step_ + totals_.steps_run, directory ? &files : nullptr);
  });
  if (!lead_) return;
  std::printf("saved %s (%s params, F32, Hugging Face %s names)\n", run_.save.c_str(),
              with_commas(p_.model.params).c_str(), hf_family_name(p_));
  if (directory)
    std::printf("saved: a model directory: the weights, %s%s\n",
                hf_directory_describe(files).c_str(),
                files.ids_from.empty()
                    ? "; no tokenizer: the training data is no token set of fsdpgen prepare"
                    : "");
}
