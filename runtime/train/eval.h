// eval: multiple-choice scoring by completion loss, llm.c's HellaSwag way
// (dev/data/hellaswag.py): each candidate is one sequence, the example's
// context followed by one completion; its score is the loss summed over the
// completion's tokens. acc counts examples whose lowest sum is the label's,
// acc_norm those whose lowest mean per completion token is (llm.c's
// normalization: by tokens, not by characters as lm-evaluation-harness's).
// The rows here are what the training loop's evaluation pass
// (runtime/train/training_eval.cpp) runs through the planned forward.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/files/eval_file.h"

// One candidate: completion `completion` of example `example`.
struct eval_row {
  int64_t example = 0;
  int64_t completion = 0;
};

// The candidates of examples [first, last), in order: each example's
// completions in turn.
std::vector<eval_row> eval_rows_of(const eval_file& f, int64_t first, int64_t last);

// Where each example's candidates start in the file's candidates counted in
// order ((examples + 1): the last is the total).
std::vector<int64_t> eval_candidate_offsets(const eval_file& f, int64_t examples);

// One candidate as a sequence of T positions: tokens (T) = the context, then
// the completion, then 0; targets (T) = each position's next token, 0 where
// none follows. The completion's tokens are the targets of positions
// context - 1 .. context + completion - 2.
void eval_fill_row(const eval_file& f, eval_row row, int64_t T, int32_t* tokens, int32_t* targets);

// The candidate's loss: its per-position losses (T, as the forward computes
// them on eval_fill_row's row) summed over the completion's positions.
double eval_completion_loss(const eval_file& f, eval_row row, const float* losses);

// An example's predictions from its candidates' loss sums (one per
// completion): the lowest sum, and the lowest sum per completion token; the
// first such on a tie.
struct eval_prediction {
  int64_t by_sum = 0;
  int64_t by_mean = 0;
};
eval_prediction eval_predict(const eval_example& x, const double* loss_sums);

// The scores of examples [0, examples) from every candidate's loss sum (in
// eval_candidate_offsets' order).
struct eval_scores {
  int64_t examples = 0;
  int64_t correct = 0;       // by the lowest sum (acc)
  int64_t correct_norm = 0;  // by the lowest mean (acc_norm)
  double acc() const { return examples ? static_cast<double>(correct) / examples : 0; }
  double acc_norm() const { return examples ? static_cast<double>(correct_norm) / examples : 0; }
};
eval_scores eval_score(const eval_file& f, int64_t examples, const std::vector<double>& loss_sums);
