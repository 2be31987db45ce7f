// training_eval: multiple-choice evaluation in the loop (runtime/train/eval.h):
// llm.c's HellaSwag-format file scored on the planned forward, its examples
// split over the ranks, every candidate's loss sum agreed by all of them
// (runtime/train/training_eval.h).
#include "runtime/train/training_eval.h"

#include <mpi.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/comm.h"
#include "runtime/human.h"
#include "runtime/train/eval.h"

namespace {

// What the log calls an evaluation file: its name up to the first '_' or
// '.' ("hellaswag" for hellaswag_val.bin).
std::string eval_name(const std::string& path) {
  const std::string file = std::filesystem::path(path).filename().string();
  const std::string name = file.substr(0, file.find_first_of("_."));
  return name.empty() ? file : name;
}

// Rank r's examples of n over `world` ranks: [first(r), first(r + 1)).
int64_t eval_first_example(int64_t n, int64_t world, int64_t r) {
  return r * n / world;
}

}  // namespace

void training_eval::open(const run_shape& s) {
  const std::string path = !s.o.eval.empty() ? s.o.eval : s.p.train.eval;
  const bool spec_eval = s.p.train.eval[0] != '\0';
  // --eval alone scores at the end (and the weights a 0-step run was given).
  every = s.o.eval_every >= 0 ? s.o.eval_every
          : spec_eval         ? s.p.train.eval_every
          : !path.empty()     ? std::max<int64_t>(s.steps, 1)
                              : 0;
  examples = s.o.eval_examples >= 0 ? s.o.eval_examples : s.p.train.eval_examples;
  std::string error;
  if (every > 0 && path.empty())
    error = fmt::format(
        "--eval-every {}: the spec names no evaluation file; pass --eval FILE as well "
        "(docs/eval.md)",
        every);
  if (error.empty() && every > 0) {
    try {
      file = eval_file_read(path, s.p.model.vocab, s.p.model.context);
    } catch (const std::exception& e) {
      error = fmt::format("{}{}", s.o.eval.empty() ? "the spec's eval: " : "--eval: ", e.what());
    }
  }
  agree_on_error(error, "opening the evaluation file");
  if (every <= 0) return;
  const int64_t have = static_cast<int64_t>(file.examples.size());
  if (examples == 0 || examples > have) {
    if (s.lead && examples > have)
      std::printf(
          "note: eval: %s holds %s examples, fewer than eval_examples %s: each evaluation "
          "scores all of them\n",
          path.c_str(), with_commas(have).c_str(), with_commas(examples).c_str());
    examples = have;
  }
  if (s.lead)
    std::printf(
        "eval: %s: %s of its %s examples (%s candidates) every %s, at checkpoints and at "
        "the end\n",
        path.c_str(), with_commas(examples).c_str(), with_commas(have).c_str(),
        with_commas(eval_candidate_offsets(file, examples).back()).c_str(),
        every == 1 ? "step" : fmt::format("{} steps", every).c_str());
}

bool training_eval::due(int64_t steps_done, int64_t steps, bool stop, bool checkpoint_due) const {
  return every > 0 && !stop && (steps_done % every == 0 || steps_done == steps || checkpoint_due);
}

eval_record training_eval::evaluate(const run_shape& s, backend& b, int64_t steps_done) const {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t B = s.p.parallel.micro_batch, T = s.p.model.context, world = s.p.parallel.world;
  const int64_t n = examples, rank = s.li.rank;
  const std::vector<int64_t> at = eval_candidate_offsets(file, n);
  // Every rank runs as many passes as the rank with the most candidates (the
  // pass's gathers are collective); a pass's rows past a rank's last are 0.
  int64_t passes = 0;
  for (int64_t r = 0; r < world; ++r) {
    const int64_t rows = at[static_cast<size_t>(eval_first_example(n, world, r + 1))] -
                         at[static_cast<size_t>(eval_first_example(n, world, r))];
    passes = std::max(passes, (rows + B - 1) / B);
  }
  const std::vector<eval_row> rows = eval_rows_of(file, eval_first_example(n, world, rank),
                                                  eval_first_example(n, world, rank + 1));
  std::vector<int32_t> inputs(static_cast<size_t>(2 * B * T));
  std::vector<float> losses(static_cast<size_t>(B * T));
  // Each candidate's loss sum at its place in file order; 0 where another
  // rank scores it, so that the sum over ranks is every one exactly.
  std::vector<double> sums(static_cast<size_t>(at.back()), 0.0);
  for (int64_t pass = 0; pass < passes; ++pass) {
    std::fill(inputs.begin(), inputs.end(), 0);
    for (int64_t b = 0; b < B; ++b)
      if (const int64_t i = pass * B + b; i < static_cast<int64_t>(rows.size()))
        eval_fill_row(file, rows[static_cast<size_t>(i)], T, &inputs[static_cast<size_t>(b * T)],
                      &inputs[static_cast<size_t>((B + b) * T)]);
    b.run_eval(inputs.data(), losses.data());
    for (int64_t b = 0; b < B; ++b)
      if (const int64_t i = pass * B + b; i < static_cast<int64_t>(rows.size())) {
        const eval_row row = rows[static_cast<size_t>(i)];
        sums[static_cast<size_t>(at[static_cast<size_t>(row.example)] + row.completion)] =
            eval_completion_loss(file, row, &losses[static_cast<size_t>(b * T)]);
      }
  }
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_DOUBLE,
                          MPI_SUM, MPI_COMM_WORLD));
  const eval_scores scores = eval_score(file, n, sums);
  std::string error;
  if (s.lead && !s.o.eval_scores.empty()) try {
      write_scores(s.o.eval_scores, sums);
    } catch (const std::exception& e) {
      error = e.what();
    }
  agree_on_error(error, "writing --eval-scores");
  return {steps_done,
          eval_name(file.path),
          scores.acc(),
          scores.acc_norm(),
          n,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

// --eval-scores: one JSON line per example scored, replacing the last
// evaluation's (rank 0).
void training_eval::write_scores(const std::string& path,
                                 const std::vector<double>& loss_sums) const {
  const std::vector<int64_t> at = eval_candidate_offsets(file, examples);
  std::string out;
  for (int64_t e = 0; e < examples; ++e) {
    const eval_example& x = file.examples[static_cast<size_t>(e)];
    const double* sums = loss_sums.data() + at[static_cast<size_t>(e)];
    std::vector<std::string> s, tokens;
    for (size_t j = 0; j < x.completions.size(); ++j) {
      s.push_back(fmt::format("{:.9g}", sums[j]));
      tokens.push_back(std::to_string(x.completions[j].size()));
    }
    const eval_prediction p = eval_predict(x, sums);
    out += fmt::format(
        "{{\"example\": {}, \"label\": {}, \"loss_sums\": [{}], \"tokens\": [{}], \"pred\": {}, "
        "\"pred_norm\": {}}}\n",
        e, x.label, fmt::join(s, ", "), fmt::join(tokens, ", "), p.by_sum, p.by_mean);
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  const bool ok = f && std::fwrite(out.data(), 1, out.size(), f) == out.size();
  const int err = errno;
  if (f && std::fclose(f) != 0 && ok)
    throw std::runtime_error(
        fmt::format("--eval-scores {}: cannot write it: {}", path, std::strerror(errno)));
  if (!ok)
    throw std::runtime_error(
        fmt::format("--eval-scores {}: cannot write it: {}", path, std::strerror(err)));
}
