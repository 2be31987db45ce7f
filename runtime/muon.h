// muon: a Muon matrix and the optimizer's settings, as the planner's tables
// (runtime/muon_layout.h) and both backends' steps read them; the step
// itself is runtime/cpu/muon.h's and runtime/cuda/muon.h's.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/muon_math.h"

struct muon_settings {
  double lr = 0.02;  // this step's, before the shape adjustment
  double momentum = 0.95;
  bool nesterov = true;
  int ns_steps = 5;                    // Newton-Schulz iterations, 0..kMaxMuonNsSteps (limits.h)
  dtype_id ns_dtype = dtype_id::fp32;  // fp32, or bf16: iterates rounded as torch does
  double weight_decay = 0.0;           // decoupled, by the unadjusted lr
  muon_adjust adjust = muon_adjust::original;
};

// A matrix as the flat parameter stores it, row-major (rows, cols).
// stored_transposed: stored as (in_features, out_features) (GPT-2's Conv1D)
// rather than as nn.Linear's (out, in); only the lr adjustment reads the
// orientation, since the iteration commutes with transposition.
struct muon_matrix {
  int64_t rows = 0, cols = 0;
  bool stored_transposed = false;
  int64_t elems() const { return rows * cols; }
  int64_t fan_out() const { return stored_transposed ? cols : rows; }
  int64_t fan_in() const { return stored_transposed ? rows : cols; }
};
