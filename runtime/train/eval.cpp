// eval: a multiple-choice file's candidates as rows, and their scores.
#include "runtime/train/eval.h"

#include <algorithm>

std::vector<eval_row> eval_rows_of(const eval_file& f, int64_t first, int64_t last) {
  std::vector<eval_row> rows;
  for (int64_t e = first; e < last; ++e) {
    const int64_t n = static_cast<int64_t>(f.examples[static_cast<size_t>(e)].completions.size());
    for (int64_t j = 0; j < n; ++j)
      rows.push_back({e, j});
  }
  return rows;
}

std::vector<int64_t> eval_candidate_offsets(const eval_file& f, int64_t examples) {
  std::vector<int64_t> at(static_cast<size_t>(examples) + 1, 0);
  for (int64_t e = 0; e < examples; ++e)
    at[static_cast<size_t>(e) + 1] =
        at[static_cast<size_t>(e)] +
        static_cast<int64_t>(f.examples[static_cast<size_t>(e)].completions.size());
  return at;
}

void eval_fill_row(const eval_file& f, eval_row row, int64_t T, int32_t* tokens, int32_t* targets) {
  const eval_example& x = f.examples[static_cast<size_t>(row.example)];
  const std::vector<int32_t>& end = x.completions[static_cast<size_t>(row.completion)];
  const int64_t c = static_cast<int64_t>(x.context.size()), n = static_cast<int64_t>(end.size());
  std::fill(tokens, tokens + T, 0);
  std::fill(targets, targets + T, 0);
  std::copy(x.context.begin(), x.context.end(), tokens);
  std::copy(end.begin(), end.end(), tokens + c);
  // eval_file_read checked c + n <= T: the row's last token is only a target.
  for (int64_t t = 0; t + 1 < c + n; ++t)
    targets[t] = tokens[t + 1];
}

double eval_completion_loss(const eval_file& f, eval_row row, const float* losses) {
  const eval_example& x = f.examples[static_cast<size_t>(row.example)];
  const int64_t c = static_cast<int64_t>(x.context.size());
  const int64_t n = static_cast<int64_t>(x.completions[static_cast<size_t>(row.completion)].size());
  double sum = 0;
  for (int64_t t = c - 1; t < c + n - 1; ++t)
    sum += losses[t];
  return sum;
}

eval_prediction eval_predict(const eval_example& x, const double* loss_sums) {
  eval_prediction p;
  for (size_t j = 1; j < x.completions.size(); ++j) {
    if (loss_sums[j] < loss_sums[p.by_sum]) p.by_sum = static_cast<int64_t>(j);
    const double mean = loss_sums[j] / static_cast<double>(x.completions[j].size());
    const double best = loss_sums[p.by_mean] /
                        static_cast<double>(x.completions[static_cast<size_t>(p.by_mean)].size());
    if (mean < best) p.by_mean = static_cast<int64_t>(j);
  }
  return p;
}

eval_scores eval_score(const eval_file& f, int64_t examples, const std::vector<double>& loss_sums) {
  const std::vector<int64_t> at = eval_candidate_offsets(f, examples);
  eval_scores s;
  s.examples = examples;
  for (int64_t e = 0; e < examples; ++e) {
    const eval_example& x = f.examples[static_cast<size_t>(e)];
    const eval_prediction p = eval_predict(x, loss_sums.data() + at[static_cast<size_t>(e)]);
    s.correct += p.by_sum == x.label;
    s.correct_norm += p.by_mean == x.label;
  }
  return s;
}
