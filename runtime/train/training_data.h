// training_data: a run's training and validation data, opened and checked,
// the rows each step and validation pass reads (training_inputs), the
// --trace-data file, and where a step's rows were read from.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "runtime/program.h"
#include "runtime/step_context.h"
#include "runtime/train/data.h"
#include "runtime/train/run_shape.h"

// Where a step's rows come from (step_inputs, runtime/step_context.h): rank
// r's micro-batch m of a training step is the (r * micro_batches + m)-th
// micro_batch-sized slice of the step's global batch in data; a validation
// pass's rows are val's. Each fill appends its lines to --trace-data's file
// (trace_fd; -1: off).
struct training_inputs final : step_inputs {
  const dataloader* data = nullptr;
  const dataloader* val = nullptr;
  int trace_fd = -1;
  void fill(const step_context& c, int64_t mb, int32_t* tokens, int32_t* targets) const override;
};

struct training_data {
  training_data() = default;
  training_data(const training_data&) = delete;  // inputs points into it
  training_data& operator=(const training_data&) = delete;

  // Collective: the training data and, when validated (val_every > 0), the
  // validation data; val_sequences becomes all it holds where that is fewer.
  // Nothing is read yet: files are checked and mapped.
  void open(const run_shape& s, int64_t val_every, int64_t& val_sequences);

  // Where each rank's rows of `step` are read from, one rank a line
  // (`sequence_base`: step_context's).
  std::string rows_of_step(const program& p, int64_t sequence_base, int64_t step) const;
  // Rank `rank`'s rows of `step`: one line.
  std::string rows_of_rank(const program& p, int64_t sequence_base, int64_t step,
                           int64_t rank) const;

  dataloader data;
  dataloader val;
  training_inputs inputs;  // step_context::inputs: data's and val's rows
  double open_ms = 0;      // opening the training data: expanding, mapping, checking headers
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> trace{nullptr, std::fclose};  // --trace-data

 private:
  void warn_if_val_is_trained_on(bool lead) const;
};

// The training or validation data as the run reads it: the spec's source, or
// the flag's files (`flag`: the run's, `given`: this launch's), of `role`
// "data" or "val".
data_config data_config_of(const program& p, const program_data& spec,
                           const std::vector<std::string>& flag,
                           const std::vector<std::string>& given, bool allow_bytes, bool shuffle,
                           const char* role);
